import { createTestClock } from '@idgen/clock-guard';
import { LeaseConfigError } from './errors.js';
import { RecordingTarget } from './recording-target.test-helper.js';
import { createStandaloneLease } from './standalone-lease.js';

describe('createStandaloneLease (one node only)', () => {
  it('assigns the first worker of the range with floor = now and no deadline; release unassigns', async () => {
    const clock = createTestClock(1_800_000_000_000);
    const target = new RecordingTarget('t');
    const lease = createStandaloneLease({ region: 3, workers: '5-9', clock, nodeId: 'solo' }, target);
    const states: string[] = [];
    lease.on('state', (s) => states.push(s.state));
    await lease.start();
    expect(target.assignment).toEqual({ region: 3, worker: 5, floorMs: 1_800_000_000_000, deadlineMonoMs: Infinity });
    expect(lease.snapshot()).toMatchObject({ state: 'alive', mode: 'standalone', region: 3, worker: 5, nodeId: 'solo' });
    expect(lease.snapshot().message).toMatch(/one node only/);
    await lease.register();
    await lease.release();
    await lease.release();
    expect(target.of('unassign')).toHaveLength(1);
    expect(target.assignment).toBeUndefined();
    expect(states).toEqual(['alive', 'released']);
    await expect(lease.start()).rejects.toThrow(/released/);
  });

  it('validates before anything', () => {
    expect(() => createStandaloneLease({ region: 8 }, new RecordingTarget('t'))).toThrow(LeaseConfigError);
    expect(() => createStandaloneLease({ region: 1, workers: '7-3' }, new RecordingTarget('t'))).toThrow(/workers must be a range/);
  });
});
