// failover.js drives three registry replicas with the npm package
// eureka-js-client (4.5.0) for failover_long_test.go: clients pointed at
// every replica as the client's README configures a static cluster
// (eureka.serviceUrls.default, a list), which keep registering and renewing
// through a failover with the client's own retry: a request that fails, or
// gets a 5xx, is tried again maxRetries times, each after
// requestRetryDelay × attempt ms, each on the next URL of the list (the
// list stays turned: later requests start from the URL that answered).
//
// It takes one argument, a JSON object:
//
//   {"serviceUrls": ["http://127.0.0.1:8761/eureka/apps/", …], "app": "JSFAILOVER",
//    "heartbeatInterval": 500, "leaseSecs": 10, "spawnEvery": 1000, "spawnMax": 40}
//
// and starts client js-1 at once, then one more (js-2, js-3, …) every
// spawnEvery ms up to spawnMax: each its own Eureka object and instance, so
// each start is a registration through the client. A start that fails (the
// registration failed after the client's retries) is started again a
// second later, as a supervisor would restart the application. It prints
// one JSON object a line on stdout:
//
//   {"step":"register","id":"js-1","status":204,"n":1}   a POST's answer, after the client's retries
//   {"step":"renew","id":"js-1","status":200,"n":7}      a heartbeat's answer, after the client's retries
//   {"step":"retry","id":"js-1","url":"http://…"}        an attempt that failed, tried again on the next URL
//   {"step":"started","id":"js-2"}                       start() called back without error
//   {"step":"start-failed","id":"js-2","error":"…"}      start() called back with an error
//   {"step":"log","id":"js-1","level":"error","msg":"…"} the client's own log (warn and error)
//
// A line "hold" on stdin stops starting new clients; the end of stdin exits.
'use strict';

const Eureka = require('eureka-js-client').Eureka;

const opts = JSON.parse(process.argv[2] || '{}');

function out(obj) {
  process.stdout.write(JSON.stringify(obj) + '\n');
}

function text(args) {
  return args.map((a) => (a instanceof Error ? String(a) : typeof a === 'string' ? a : JSON.stringify(a))).join(' ');
}

function newClient(id) {
  const logAt = (level) => (...args) => {
    if (level === 'debug' || level === 'info') return;
    const msg = text(args);
    // One line per failed attempt the client retries (EurekaClient.js,
    // eurekaRequest): the URL it failed on.
    const m = /^Eureka request failed to endpoint (\S+),/.exec(msg);
    if (m) {
      out({ step: 'retry', id, url: m[1] });
      return;
    }
    out({ step: 'log', id, level, msg });
  };
  const client = new Eureka({
    logger: { debug: logAt('debug'), info: logAt('info'), warn: logAt('warn'), error: logAt('error') },
    cwd: process.cwd(), // no eureka-client.yml there: the test runs it in an empty directory
    // A request to a replica that hangs ends, and is retried, rather than
    // waiting forever (request has no timeout of its own).
    requestMiddleware: (req, done) => done(Object.assign(req, { timeout: 5000 })),
    eureka: {
      serviceUrls: { default: opts.serviceUrls },
      heartbeatInterval: opts.heartbeatInterval || 500,
      maxRetries: 3,
      requestRetryDelay: 200,
      fetchRegistry: false,
      registerWithEureka: true,
    },
    instance: {
      instanceId: id,
      app: opts.app,
      hostName: id + '.local',
      ipAddr: '127.0.0.1',
      port: { $: 3000, '@enabled': true },
      vipAddress: opts.app.toLowerCase(),
      dataCenterInfo: {
        '@class': 'com.netflix.appinfo.InstanceInfo$DefaultDataCenterInfo',
        name: 'MyOwn',
      },
      leaseInfo: { renewalIntervalInSecs: 1, durationInSecs: opts.leaseSecs || 10 },
    },
  });
  const n = { register: 0, renew: 0 };
  // Every request goes through eurekaRequest: wrap it to see each final
  // answer. A retry re-enters with the wrapped callback already.
  const eurekaRequest = client.eurekaRequest.bind(client);
  client.eurekaRequest = function (reqOpts, callback, attempt) {
    if (attempt) return eurekaRequest(reqOpts, callback, attempt);
    return eurekaRequest(reqOpts, (error, response, body) => {
      const status = response ? response.statusCode : 0;
      const err = error ? String(error) : undefined;
      switch ((reqOpts.method || 'GET').toUpperCase()) {
        case 'POST':
          out({ step: 'register', id, status, n: ++n.register, error: err });
          break;
        case 'PUT':
          out({ step: 'renew', id, status, n: ++n.renew, error: err });
          break;
        default:
      }
      return callback(error, response, body);
    }, attempt);
  };
  const start = () => {
    client.start((err) => {
      if (err) {
        out({ step: 'start-failed', id, error: String(err) });
        setTimeout(start, 1000);
        return;
      }
      out({ step: 'started', id });
    });
  };
  start();
  return client;
}

let spawned = 0;
let held = false;
function spawn() {
  if (held || spawned >= (opts.spawnMax || 1)) return;
  spawned++;
  newClient('js-' + spawned);
  setTimeout(spawn, opts.spawnEvery || 1000);
}
spawn();

const failsafe = setTimeout(() => {
  out({ step: 'timeout' });
  process.exit(3);
}, 180000);
failsafe.unref();

require('./stdin.js')((line) => {
  if (line === 'hold') held = true;
}, () => process.exit(0));
