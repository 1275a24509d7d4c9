// Drives npm ali-ons@3.12.0 (a pure JavaScript RocketMQ remoting client) for the broker tests.
// node ali_client.js produce|consume --namesrv ADDR --group G --topic T [--count N] [--timeout S]
// Prints one JSON object per line (sends, received messages), then {"done": ...}.
'use strict';
const path = require('path');
const mods = process.env.ALI_ONS_MODULES || path.join(__dirname, '..', '..', '..', '.clients', 'node', 'node_modules');
const { Producer, Consumer, Message } = require(path.join(mods, 'ali-ons'));

const args = {};
for (let i = 3; i < process.argv.length; i += 2) args[process.argv[i].replace(/^--/, '')] = process.argv[i + 1];
const count = Number(args.count || 10);
const timeoutMs = Number(args.timeout || 30) * 1000;
const out = doc => process.stdout.write(JSON.stringify(doc) + '\n');
const httpclient = {}; // required by the constructor, unused when nameSrv is given
const quiet = { info() {}, warn() {}, error() {}, debug() {} };

async function produce() {
  const producer = new Producer({ httpclient, nameSrv: args.namesrv, producerGroup: args.group, logger: quiet });
  await producer.ready();
  const tags = (args.tags || 'TagA').split(',');
  for (let i = 0; i < count; i++) {
    const msg = new Message(args.topic, tags[i % tags.length], Buffer.from(`ali-${i}`));
    msg.keys = [`ali-key-${i}`];
    const r = await producer.send(msg);
    out({ i, status: r.sendStatus, msg_id: r.msgId, queue_id: r.messageQueue.queueId, queue_offset: r.queueOffset });
  }
  await producer.close();
  out({ done: true });
}

async function consume() {
  const consumer = new Consumer({ httpclient, nameSrv: args.namesrv, consumerGroup: args.group, logger: quiet,
    consumeFromWhere: args.from || 'CONSUME_FROM_FIRST_OFFSET' });
  consumer.on('error', () => {}); // QUERY_NOT_FOUND for a new group surfaces as an error event
  let n = 0;
  let finish;
  const done = new Promise(resolve => { finish = resolve; });
  consumer.subscribe(args.topic, args.expr || '*', async msg => {
    n++;
    out({ topic: msg.topic, tags: msg.tags, keys: msg.keys, body: msg.body.toString(), msg_id: msg.msgId,
          queue_id: msg.queueId, queue_offset: Number(msg.queueOffset), reconsume_times: msg.reconsumeTimes });
    if (n >= count) finish();
  });
  await consumer.ready();
  out({ started: true });
  await Promise.race([done, new Promise(r => setTimeout(r, timeoutMs))]);
  await new Promise(r => setTimeout(r, Number(args.linger || 0) * 1000));
  await consumer.close();
  out({ done: true, count: n });
}

({ produce, consume })[process.argv[2]]().then(() => process.exit(0), err => {
  out({ error: String(err && err.stack || err) });
  process.exit(1);
});
