import { Code, ConnectError } from '@connectrpc/connect';
import { classifyFailure, codeName } from './transport.js';

describe('classifyFailure', () => {
  it.each([
    [new ConnectError('fenced', Code.Unavailable), 'node', 'unavailable'],
    [new ConnectError('slow', Code.DeadlineExceeded), 'node', 'deadline_exceeded'],
    [new ConnectError('reset', Code.Aborted), 'node', 'aborted'],
    [new ConnectError('h2', Code.Internal), 'node', 'internal'],
    [new ConnectError('bad count', Code.InvalidArgument), 'request', 'invalid_argument'],
    [new ConnectError('who', Code.Unauthenticated), 'request', 'unauthenticated'],
    [Object.assign(new Error('connect ECONNREFUSED'), { code: 'ECONNREFUSED' }), 'node', 'unavailable'],
    [new Error('wrapped', { cause: Object.assign(new Error('reset'), { code: 'ECONNRESET' }) }), 'node', 'unavailable'],
    ['a string', 'node', 'unknown'],
  ])('%s → %s %s', (error, kind, code) => {
    expect(classifyFailure(error)).toMatchObject({ kind, code });
  });

  it('names codes in snake case', () => {
    expect(codeName(Code.ResourceExhausted)).toBe('resource_exhausted');
    expect(codeName(Code.Canceled)).toBe('canceled');
  });
});
