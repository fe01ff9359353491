/**
 * `@idgen/testing`: the test harness. Real parts, really started (preamble): a real `etcd` (one member or a
 * cluster) and real child processes on loopback, on free ports and temp dirs, always cleaned up, even when
 * a test fails (`cleanupAll()` in `afterAll`, plus a process `exit` hook).
 *
 * @packageDocumentation
 */
export {
  ETCD_MISSING_MESSAGE,
  QUICK_LEASE_SETTINGS,
  bindRegion,
  etcdHealthy,
  etcdStatus,
  startEtcd,
  startEtcdCluster,
} from './etcd.js';
export type { EtcdCluster, EtcdMember, EtcdServer, StartEtcdClusterOptions, StartEtcdOptions } from './etcd.js';
export { findOnPath } from './find-on-path.js';
export { lentEarlierClock } from './loan-clock.js';
export { mintTogether } from './mint-together.js';
export type { IdTaker, MintedTogether } from './mint-together.js';
export { shieldFromOutsideLoad } from './priority.js';
export { freePort, tempDir, tempDirSync } from './net.js';
export { createRandom } from './random.js';
export type { TempDir } from './net.js';
export { shebangNodeFlags, spawnProcess } from './process.js';
export { serverLaunchArgs } from './server-launch.js';
export type { ProcessExit, ProcessHandle, SpawnProcessOptions } from './process.js';
export { cleanupAll, liveCount } from './registry.js';
export { REGISTER_TS_PATH, tsNodeArgs } from './ts-node.js';
export { createTcpProxy } from './tcp-proxy.js';
export type { TcpProxy, TcpProxyCutMode, TcpProxyOptions } from './tcp-proxy.js';
export { OPENSSL_MISSING_MESSAGE, enableEtcdAuth, etcdctl, makeTestPki } from './tls.js';
export type { EtcdTestUser, TestCertificate, TestPki } from './tls.js';
export { CHRONY_HEALTHY, CHRONY_UNSYNCHRONISED, createChronyStub } from './chrony-stub.js';
export type { ChronyStub } from './chrony-stub.js';
export { startDnsServer, type TestDnsFailure, type TestDnsServer } from './dns-server.js';
export { readmeExample, runTsExample } from './readme-example.js';
export { h2specBinary, runH2spec } from './h2spec.js';
export type { H2specResult } from './h2spec.js';
export { CALLER_CN, DEPLOYMENT_USERS, ETCD_CLIENT_CN, startDeployment } from './deployment.js';
export { exportLines, writeDeploymentFile } from './deployment-file.js';
export type {
  CliResult,
  Deployment,
  DeploymentCaller,
  DeploymentCallerCommand,
  DeploymentNode,
  DeploymentRegion,
  DeploymentUser,
  DeploymentUserName,
  StartDeploymentOptions,
} from './deployment.js';
