#!/usr/bin/env node
// Follow a chat's lettaq reply stream until one turn's answer, with ioredis.
//
//   npm ci && node follow-reply.js INTEGRATION CHAT_ID TASK_ID [FROM_ID]
//
// REDIS_URL (default redis://127.0.0.1:6379/0) and LETTAQ_KEY_PREFIX (default "lettaq:") name
// the stream as the workers write it: <prefix>replies:<integration>:<chat_id>. The answer goes
// to stdout as it grows (answer_delta, narration left out); the exit code is 0 for the answer,
// 1 for an error event, 4 for approval_required, 3 when nothing final came within
// FOLLOW_TIMEOUT_MS (default 600000). The wire format: docs/reply-events.md.
"use strict";
const Redis = require("ioredis");

const FINAL = { answer: 0, error: 1, approval_required: 4 };

// follow calls onEvent(type, data) for taskId's events in order, up to its final event, whose
// type it returns.
async function follow(redis, key, taskId, lastId, timeoutMs, onEvent) {
  let seen = 0; // the highest seq shown: an event with seq <= it was seen (an attempt repeats)
  const deadline = Date.now() + timeoutMs;
  while (Date.now() < deadline) {
    const block = Math.max(1, Math.min(5000, deadline - Date.now()));
    const res = await redis.xread("COUNT", 100, "BLOCK", block, "STREAMS", key, lastId);
    for (const [, entries] of res || []) {
      for (const [id, flat] of entries) {
        lastId = id;
        const f = {};
        for (let i = 0; i + 1 < flat.length; i += 2) f[flat[i]] = flat[i + 1];
        if (f.task_id !== taskId) continue; // another turn of the same chat, or a notify (its own task id)
        const seq = Number(f.seq || 0);
        if (seq <= seen) continue;
        seen = seq;
        onEvent(f.type, JSON.parse(f.data || "{}"));
        if (f.type in FINAL) return f.type;
      }
    }
  }
  return null;
}

async function main() {
  const [integration, chatId, taskId, from = "0"] = process.argv.slice(2);
  if (!taskId) {
    console.error("usage: node follow-reply.js INTEGRATION CHAT_ID TASK_ID [FROM_ID]");
    return 2;
  }
  const prefix = process.env.LETTAQ_KEY_PREFIX || "lettaq:";
  const redis = new Redis(process.env.REDIS_URL || "redis://127.0.0.1:6379/0", { maxRetriesPerRequest: 3 });
  let shown = "";
  try {
    const final = await follow(redis, `${prefix}replies:${integration}:${chatId}`, taskId, from,
      Number(process.env.FOLLOW_TIMEOUT_MS || 600000), (type, data) => {
        if (type === "answer_delta" && !data.narration) {
          process.stdout.write(data.text || "");
          shown += data.text || "";
        } else if (type === "answer") {
          // The answer is the whole text: print what the deltas did not show yet.
          const text = data.text || "";
          process.stdout.write((text.startsWith(shown) ? text.slice(shown.length) : "\n" + text) + "\n");
        } else if (type in FINAL) {
          console.error(`${type}: ${data.text || ""} (stop_reason ${data.stop_reason || ""})`);
        }
      });
    if (final === null) {
      console.error(`no final event for ${taskId}`);
      return 3;
    }
    return FINAL[final];
  } finally {
    redis.disconnect();
  }
}

main().then((code) => process.exit(code), (err) => { console.error(err); process.exit(1); });
