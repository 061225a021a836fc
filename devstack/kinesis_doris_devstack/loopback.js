// Preloaded with `node -r` into the Kinesis emulators: kinesis-mock hard-codes 0.0.0.0 and
// kinesalite's CLI has no host flag, so every server socket is forced onto 127.0.0.1 here.
'use strict';
const net = require('net');

const listen = net.Server.prototype.listen;
net.Server.prototype.listen = function (...args) {
  const first = args[0];
  if (first !== null && typeof first === 'object' && !Array.isArray(first)) {
    args[0] = Object.assign({}, first, { host: '127.0.0.1' });
  } else if (typeof first === 'number' || typeof first === 'string') {
    if (typeof args[1] === 'string') {
      args[1] = '127.0.0.1';
    } else {
      args.splice(1, 0, '127.0.0.1');
    }
  }
  return listen.apply(this, args);
};
