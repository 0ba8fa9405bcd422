// stdin.js: the test's commands to client.js and failover.js, one a line
// on stdin. onLine gets each line, trimmed; onEnd runs when stdin ends,
// which is how the test stops the script.
'use strict';

module.exports = function readCommands(onLine, onEnd) {
  let buf = '';
  process.stdin.setEncoding('utf8');
  process.stdin.on('data', (chunk) => {
    buf += chunk;
    let i;
    while ((i = buf.indexOf('\n')) >= 0) {
      const line = buf.slice(0, i).trim();
      buf = buf.slice(i + 1);
      onLine(line);
    }
  });
  process.stdin.on('end', onEnd);
};
