import type { EtcdMember } from '@idgen/testing';
import { followersOf, judgeMemberDown } from './etcd-member-down.js';

const member = (name: string, running = true): EtcdMember =>
  ({ name, running: () => running }) as unknown as EtcdMember;

describe('etcd-member-down', () => {
  it('picks among the running followers, never the leader', () => {
    const [m1, m2, m3] = [member('m1'), member('m2'), member('m3')];
    expect(followersOf([m3, m1, m2], m2).map((m) => m.name)).toEqual(['m1', 'm3']);
    expect(followersOf([m1, member('m2', false), m3], m1).map((m) => m.name)).toEqual(['m3']);
  });

  it('expects no lease fence and no failed call', () => {
    expect(judgeMemberDown(0, 0)).toBeUndefined();
    expect(judgeMemberDown(3, 0)).toBe('one etcd follower down cost 3 lease fence(s) (expected none)');
    expect(judgeMemberDown(2, 5)).toBe(
      'one etcd follower down cost 2 lease fence(s) and 5 failed call(s) (expected none)',
    );
  });
});
