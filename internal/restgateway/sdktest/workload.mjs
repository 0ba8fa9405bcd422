// Camunda's TypeScript SDK against a REST gateway, as an application uses
// it. Configured by the environment (CAMUNDA_REST_ADDRESS, ...); run from
// a directory holding the BPMN files of sdktest.Files. Each phase prints
// one JSON line on stdout.
//
//   node workload.mjs run N        deploy every file in one deployment;
//                                  start N instances of "three" and one
//                                  awaited, complete every job with the
//                                  SDK's job worker; a message to a
//                                  waiting instance; a signal to another;
//                                  cancel one; fail one job to an incident
//   node workload.mjs resolve JOB INCIDENT
//                                  give the failed job a retry, resolve
//                                  its incident, complete it
//   node workload.mjs create N     start N instances of "three"
//   node workload.mjs work N       complete jobs of "three" until N are done
//   node workload.mjs deploy       deploy "three"
//   node workload.mjs list LIMIT   page through every process instance,
//                                  job and incident by cursor (LIMIT a
//                                  page) as an application does, and get
//                                  each incident and three instances by key
//   node workload.mjs steady RATE SECONDS [STOPFILE]
//                                  start RATE instances of "three" a second
//                                  for SECONDS (or until STOPFILE exists)
//                                  while workers complete them, then wait
//                                  for every one to complete
import { existsSync } from 'node:fs';
import { createCamundaClient } from '@camunda8/orchestration-cluster-api';

const [phase, ...args] = process.argv.slice(2);
const c = createCamundaClient();
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));
const types = ['sdk-a', 'sdk-b', 'sdk-c'];

// startWorkers runs the SDK's job workers for jobTypes; each job is
// counted once (a job seen twice is counted apart), with its instance.
function startWorkers(jobTypes, handle = (job) => job.complete({ handled: true })) {
  const ws = { seen: new Set(), instances: new Map(), twice: 0 };
  const workers = jobTypes.map((jobType) => c.createJobWorker({
    jobType, workerName: 'sdk-test', maxParallelJobs: 8,
    jobTimeoutMs: 30000, pollTimeoutMs: 2000, pollIntervalMs: 50,
    jobHandler: async (job) => {
      if (ws.seen.has(job.jobKey)) ws.twice++;
      ws.seen.add(job.jobKey);
      const r = await handle(job);
      ws.instances.set(job.processInstanceKey, (ws.instances.get(job.processInstanceKey) ?? 0) + 1);
      return r;
    },
  }));
  ws.stop = () => Promise.all(workers.map((w) => w.stopGracefully({ waitUpToMs: 5000 })));
  return ws;
}

// work completes jobs of the given types until want are done (or 60 s
// pass).
async function work(jobTypes, want, handle) {
  const ws = startWorkers(jobTypes, handle);
  const deadline = Date.now() + 60000;
  while (ws.seen.size < want && Date.now() < deadline) await sleep(50);
  await ws.stop();
  return { jobs: [...ws.seen], twice: ws.twice };
}

const create = (processDefinitionId, variables = {}) =>
  c.createProcessInstance({ processDefinitionId, variables }).then((r) => r.processInstanceKey);

const out = {};
switch (phase) {
  case 'run': {
    const n = Number(args[0]);
    out.gatewayVersion = (await c.getTopology()).gatewayVersion;
    const dep = await c.deployResourcesFromFiles(['three.bpmn', 'wait.bpmn', 'signal.bpmn', 'fail.bpmn']);
    out.deploymentKey = dep.deploymentKey;
    out.processes = dep.processes.map((p) => p.processDefinitionId).sort();

    const worked = work(types, 3 * (n + 1));
    out.instances = [];
    for (let i = 0; i < n; i++) out.instances.push(await create('three', { i }));
    const awaited = await c.createProcessInstance({
      processDefinitionId: 'three', variables: { i: -1 }, awaitCompletion: true, requestTimeout: 30000,
    });
    out.awaited = awaited.processInstanceKey;
    out.awaitedVariables = awaited.variables;
    const w = await worked;
    out.jobs = w.jobs.length;
    out.twice = w.twice;

    // Started after the workers stopped, so its first job waits: cancelled.
    out.cancelled = await create('three');
    await c.cancelProcessInstance({ processInstanceKey: out.cancelled });

    out.waiting = await create('wait', { orderId: 'o-1' });
    out.messageKey = (await c.publishMessage({ name: 'sdk-paid', correlationKey: 'o-1', timeToLive: 60000 })).messageKey;
    out.signalled = await create('signal');
    out.signalKey = (await c.broadcastSignal({ signalName: 'sdk-go' })).signalKey;

    // Fails without retries: an incident the test resolves with "resolve".
    out.failing = await create('fail');
    const f = await work(['sdk-fail'], 1, (job) => job.fail({ errorMessage: 'sdk test', retries: 0 }));
    out.failedJob = f.jobs[0];
    break;
  }
  case 'resolve': {
    const [jobKey, incidentKey] = args;
    await c.updateJob({ jobKey, changeset: { retries: 1 } });
    await c.resolveIncident({ incidentKey });
    const w = await work(['sdk-fail'], 1);
    out.jobs = w.jobs;
    out.twice = w.twice;
    break;
  }
  case 'create': {
    out.instances = [];
    for (let i = 0; i < Number(args[0]); i++) out.instances.push(await create('three', { i }));
    break;
  }
  case 'work': {
    const w = await work(types, Number(args[0]));
    out.jobs = w.jobs;
    out.twice = w.twice;
    break;
  }
  case 'deploy': {
    out.deploymentKey = (await c.deployResourcesFromFiles(['three.bpmn'])).deploymentKey;
    break;
  }
  case 'list': {
    const limit = Number(args[0]);
    const once = { consistency: { waitUpToMs: 0 } };
    // Strict request validation of SDK 9.1.5 drops a cursor: its page is
    // a union whose first member, { limit }, matches { limit, after } and
    // strips after. Requests go unchecked here; answers stay strict.
    const q = createCamundaClient({ config: { CAMUNDA_SDK_VALIDATION: 'req:none,res:strict' } });
    const all = async (search) => {
      const items = [];
      let after;
      for (let pages = 0; pages < 1000; pages++) {
        const r = await search({ page: after ? { limit, after } : { limit } }, once);
        items.push(...r.items);
        if (r.items.length === 0 || !r.page.endCursor || items.length >= Number(r.page.totalItems)) break;
        after = r.page.endCursor;
      }
      return items;
    };
    out.instances = (await all((b, o) => q.searchProcessInstances(b, o))).map((p) => p.processInstanceKey);
    out.jobs = (await all((b, o) => q.searchJobs(b, o))).map((j) => j.jobKey);
    out.incidents = (await all((b, o) => q.searchIncidents(b, o))).map((i) => i.incidentKey);
    out.got = [];
    for (const processInstanceKey of out.instances.slice(0, 3)) {
      out.got.push((await q.getProcessInstance({ processInstanceKey }, once)).processInstanceKey);
    }
    for (const incidentKey of out.incidents) out.got.push((await q.getIncident({ incidentKey }, once)).incidentKey);
    break;
  }
  case 'steady': {
    const [rate, seconds] = args.slice(0, 2).map(Number);
    const stopFile = args[2];
    const ws = startWorkers(types);
    const created = [];
    const errors = [];
    const pending = [];
    const end = Date.now() + seconds * 1000;
    for (let next = Date.now(); next < end && !(stopFile && existsSync(stopFile)); next += 1000 / rate) {
      await sleep(Math.max(0, next - Date.now()));
      pending.push(create('three').then((k) => created.push(k), (e) => errors.push(String(e))));
    }
    await Promise.all(pending);
    const deadline = Date.now() + 60000;
    const complete = () => created.filter((k) => ws.instances.get(k) === types.length).length;
    while (complete() < created.length && Date.now() < deadline) await sleep(50);
    await ws.stop();
    out.created = created;
    out.completed = complete();
    out.errors = errors.slice(0, 5);
    out.failed = errors.length;
    out.twice = ws.twice;
    break;
  }
  default:
    throw new Error(`unknown phase ${phase}`);
}
console.log(JSON.stringify(out));
