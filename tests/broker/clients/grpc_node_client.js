// Drives npm rocketmq-client-nodejs@1.0.8 (RocketMQ 5's gRPC client for Node.js) for the broker tests.
// node grpc_node_client.js produce|simple|push --endpoints HOST:PORT --topic T [--group G] [--count N]
//   [--tag TAG] [--timeout S]
// produce: sends N messages (Producer); simple: receives and acks until N distinct messages
// (SimpleConsumer); push: a PushConsumer that acks until N distinct messages arrived.
// Prints one JSON object per line, then {"done": ...}. The client logs to $HOME/logs/rocketmq/.
'use strict';
const path = require('path');
const mods = process.env.NODE_CLIENT_MODULES || path.join(__dirname, '..', '..', '..', '.clients', 'node', 'node_modules');
const { Producer, SimpleConsumer, PushConsumer, ConsumeResult } = require(path.join(mods, 'rocketmq-client-nodejs'));

const args = {};
for (let i = 3; i < process.argv.length; i += 2) args[process.argv[i].replace(/^--/, '')] = process.argv[i + 1];
const count = Number(args.count || 10);
const timeoutMs = Number(args.timeout || 60) * 1000;
const out = doc => process.stdout.write(JSON.stringify(doc) + '\n');

async function produce() {
  const producer = new Producer({ endpoints: args.endpoints, topics: [ args.topic ] });
  await producer.startup();
  const ids = [];
  for (let i = 0; i < count; i++) {
    const r = await producer.send({ topic: args.topic, tag: args.tag || 'node', keys: [ `node-key-${i}` ],
      body: Buffer.from(`node-${i}`), properties: new Map([ [ 'n', String(i) ] ]) });
    ids.push(r.messageId);
  }
  out({ sent: ids });
  await producer.shutdown();
  out({ done: true });
}

function view(m) {
  return { id: m.messageId, body: m.body.toString(), attempt: m.deliveryAttempt, tag: m.tag, keys: m.keys,
    corrupted: !!m.corrupted, props: Object.fromEntries(m.properties || []) };
}

async function simple() {
  const consumer = new SimpleConsumer({ endpoints: args.endpoints, consumerGroup: args.group,
    subscriptions: new Map([ [ args.topic, args.tag || '*' ] ]), awaitDuration: 3000 });
  await consumer.startup();
  const seen = new Map();
  const end = Date.now() + timeoutMs;
  while (seen.size < count && Date.now() < end) {
    const msgs = await consumer.receive(16, 20000);
    for (const m of msgs) {
      seen.set(m.messageId, (seen.get(m.messageId) || 0) + 1);
      if (seen.get(m.messageId) === 1) out({ msg: view(m) });
      await consumer.ack(m);
    }
  }
  out({ counts: Object.fromEntries(seen) });
  await consumer.shutdown();
  out({ done: true });
}

async function push() {
  const seen = new Map();
  let resolve;
  const finished = new Promise(r => { resolve = r; });
  const consumer = new PushConsumer({ endpoints: args.endpoints, consumerGroup: args.group,
    subscriptions: new Map([ [ args.topic, args.tag || '*' ] ]),
    messageListener: {
      async consume(m) {
        seen.set(m.messageId, (seen.get(m.messageId) || 0) + 1);
        if (seen.size >= count) resolve();
        return ConsumeResult.SUCCESS;
      },
    } });
  await consumer.startup();
  await Promise.race([ finished, new Promise(r => setTimeout(r, timeoutMs)) ]);
  await new Promise(r => setTimeout(r, 1000)); // let the last acks go out
  out({ counts: Object.fromEntries(seen) });
  await consumer.shutdown();
  out({ done: true });
}

const ops = { produce, simple, push };
ops[process.argv[2]]().then(() => process.exit(0), err => {
  out({ error: String(err && err.stack || err) });
  process.exit(1);
});
