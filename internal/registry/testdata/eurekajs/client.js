// client.js drives the registry with the npm package eureka-js-client
// (4.5.0) for eurekajs_test.go. It takes one argument, a JSON object:
//
//   {"port": 8080, "servicePath": "/eureka/v2/apps/", "filterUpInstances": false,
//    "watch": ["JSCLIENT", "ORDERS"]}
//
// and prints one JSON object a line on stdout:
//
//   {"step":"started"}                           start() finished without error
//   {"step":"register","status":204,"n":1}       a POST and its answer
//   {"step":"renew","status":200,"n":7}          a heartbeat and its answer
//   {"step":"deregister","status":200}           the DELETE of stop()
//   {"step":"fetched","kind":"full"|"delta", "version":"12", "hashcode":"UP_2_",
//    "local":"UP_2_", "fulls":1, "deltas":5, "apps":{"ORDERS":[…]}}
//                                                after the client applied a fetch:
//                                                what getInstancesByAppId answers
//   {"step":"log","level":"warn","msg":"…"}      the client's own log
//   {"step":"stopped","error":null}              stop() called back
//
// A line "stop" on stdin stops the client (which deregisters) and exits;
// the end of stdin exits at once.
'use strict';

const Eureka = require('eureka-js-client').Eureka;

const opts = JSON.parse(process.argv[2] || '{}');

function out(obj) {
  process.stdout.write(JSON.stringify(obj) + '\n');
}

// The client's log, as lines the test can read. getInstancesByAppId warns on
// every call for an app it has no instance of: that is noise here.
function logAt(level) {
  return (...args) => {
    const msg = args.map((a) => (a instanceof Error ? a.stack || String(a) : typeof a === 'string' ? a : JSON.stringify(a))).join(' ');
    if (level === 'warn' && /^Unable to retrieve/.test(msg)) return;
    if (level === 'debug') return;
    out({ step: 'log', level, msg });
  };
}
const logger = { debug: logAt('debug'), info: logAt('info'), warn: logAt('warn'), error: logAt('error') };

const client = new Eureka({
  logger,
  cwd: process.cwd(), // no eureka-client.yml there: the test runs it in an empty directory
  shouldUseDelta: true, // top level, not under eureka
  eureka: {
    host: '127.0.0.1',
    port: opts.port,
    servicePath: opts.servicePath,
    // The test's steps wait for the next heartbeat or fetch. A fetch
    // interval shorter than the first (full) fetch can take on a loaded
    // machine makes the client fetch everything twice.
    heartbeatInterval: 200,
    registryFetchInterval: 500,
    maxRetries: 1,
    requestRetryDelay: 100,
    fetchRegistry: true,
    registerWithEureka: true,
    filterUpInstances: opts.filterUpInstances !== false,
  },
  instance: {
    instanceId: 'js-1',
    app: 'jsclient', // lower case, as Spring users write it: the registry keeps JSCLIENT
    hostName: 'js-1.local',
    ipAddr: '127.0.0.1',
    port: { $: 3000, '@enabled': true }, // a boolean, as README of eureka-js-client shows
    vipAddress: 'jsclient',
    statusPageUrl: 'http://js-1.local:3000/info',
    healthCheckUrl: 'http://js-1.local:3000/health',
    homePageUrl: 'http://js-1.local:3000/',
    dataCenterInfo: {
      '@class': 'com.netflix.appinfo.InstanceInfo$DefaultDataCenterInfo',
      name: 'MyOwn',
    },
    // The client sends the instance object as it is: leaseInfo goes along.
    leaseInfo: { renewalIntervalInSecs: 1, durationInSecs: 10 },
    metadata: { zone: 'a', runtime: 'node' },
  },
});

// Eureka's reconcile hashcode over the client's copy, as a Java client
// computes it after applying a delta: counts by status, statuses sorted.
function localHashcode() {
  const counts = {};
  for (const app of Object.keys(client.cache.app)) {
    for (const inst of client.cache.app[app]) {
      counts[inst.status] = (counts[inst.status] || 0) + 1;
    }
  }
  return Object.keys(counts).sort().map((s) => `${s}_${counts[s]}_`).join('');
}

function view(inst) {
  return {
    id: inst.instanceId,
    host: inst.hostName,
    status: inst.status,
    action: inst.actionType,
    metadata: inst.metadata,
  };
}

const watch = opts.watch || [];
const n = { register: 0, renew: 0, full: 0, delta: 0 };
let inflight = 0;

// Every request goes through eurekaRequest; wrap it to see each answer. A
// retry re-enters with the wrapped callback already, so pass it through.
const eurekaRequest = client.eurekaRequest.bind(client);
client.eurekaRequest = function (reqOpts, callback, attempt) {
  if (attempt) return eurekaRequest(reqOpts, callback, attempt);
  inflight++;
  return eurekaRequest(reqOpts, (error, response, body) => {
    inflight--;
    const status = response ? response.statusCode : 0;
    const method = (reqOpts.method || 'GET').toUpperCase();
    const err = error ? String(error) : undefined;
    let fetched;
    if (method === 'GET' && status === 200) {
      fetched = reqOpts.uri === 'delta' ? 'delta' : 'full';
      n[fetched]++;
    }
    switch (method) {
      case 'POST':
        out({ step: 'register', status, n: ++n.register, error: err });
        return callback(error, response, body);
      case 'PUT':
        out({ step: 'renew', status, n: ++n.renew, error: err });
        return callback(error, response, body);
      case 'DELETE':
        out({ step: 'deregister', status, error: err });
        return callback(error, response, body);
      default: {
        callback(error, response, body); // the client applies a fetch synchronously here
        if (!fetched) {
          out({ step: 'fetch-failed', uri: reqOpts.uri, status, error: err });
          return undefined;
        }
        let doc = {};
        try {
          doc = JSON.parse(body).applications || {};
        } catch (e) {
          out({ step: 'fetch-failed', uri: reqOpts.uri, status, error: 'unparsable body: ' + e });
          return undefined;
        }
        const apps = {};
        for (const app of watch) {
          apps[app] = client.getInstancesByAppId(app).map(view);
        }
        out({
          step: 'fetched', kind: fetched, version: doc.versions__delta, hashcode: doc.apps__hashcode,
          local: localHashcode(), fulls: n.full, deltas: n.delta, apps,
        });
        return undefined;
      }
    }
  }, attempt);
};

client.start((err) => {
  if (err) {
    out({ step: 'start-failed', error: String(err) });
    process.exit(1);
  }
  out({ step: 'started' });
});

const failsafe = setTimeout(() => {
  out({ step: 'timeout' });
  process.exit(3);
}, 120000);
failsafe.unref();

require('./stdin.js')((line) => {
  if (line === 'stop') stop();
}, () => process.exit(2));

function stop() {
  // stop() clears the timers itself, but a heartbeat in flight when the
  // DELETE lands would get 404 and register again: let those finish first.
  clearInterval(client.heartbeat);
  clearInterval(client.registryFetch);
  const wait = () => {
    if (inflight > 0) return setTimeout(wait, 10);
    client.stop((err) => {
      out({ step: 'stopped', error: err ? String(err) : null });
      process.stdout.write('', () => process.exit(0));
    });
  };
  wait();
}
