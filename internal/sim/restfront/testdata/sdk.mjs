// Camunda's TypeScript SDK against a REST gateway, as an application uses
// it: deploy, start instances (one awaited), complete every job with the
// SDK's own job worker, cancel one, publish a message. Prints one JSON line.
// Configured by the environment (CAMUNDA_REST_ADDRESS, ...).
import { createCamundaClient } from '@camunda8/orchestration-cluster-api';

const [bpmn, count] = process.argv.slice(2);
const n = Number(count);
const c = createCamundaClient();
const out = { gatewayVersion: (await c.getTopology()).gatewayVersion };
const dep = await c.deployResourcesFromFiles([bpmn]);
out.deploymentKey = dep.deploymentKey;
const id = dep.processes[0].processDefinitionId;

const seen = new Set();
let twice = 0;
const w = c.createJobWorker({
  jobType: 'sdk-task', workerName: 'sdk-test', maxParallelJobs: 8,
  jobTimeoutMs: 30000, pollTimeoutMs: 2000, pollIntervalMs: 50,
  jobHandler: (job) => {
    if (seen.has(job.jobKey)) twice++;
    seen.add(job.jobKey);
    return job.complete({ handled: true });
  },
});
out.instances = [];
for (let i = 0; i < n; i++) {
  out.instances.push((await c.createProcessInstance({ processDefinitionId: id, variables: { i } })).processInstanceKey);
}
const awaited = await c.createProcessInstance({
  processDefinitionId: id, variables: { i: -1 }, awaitCompletion: true, requestTimeout: 30000,
});
out.awaited = awaited.processInstanceKey;
out.awaitedVariables = awaited.variables;
const deadline = Date.now() + 30000;
while (seen.size < n + 1 && Date.now() < deadline) await new Promise((r) => setTimeout(r, 50));
await w.stopGracefully({ waitUpToMs: 5000 });
out.jobs = seen.size;
out.twice = twice;

// Started after the worker stopped, so its job waits: cancelled.
const lone = await c.createProcessInstance({ processDefinitionId: id });
await c.cancelProcessInstance({ processInstanceKey: lone.processInstanceKey });
out.cancelled = lone.processInstanceKey;
out.messageKey = (await c.publishMessage({ name: 'sdk-message', correlationKey: 'k', timeToLive: 1000 })).messageKey;
console.log(JSON.stringify(out));
