// test/bench/peers/gw.cjs: graphile-worker's worker for test/bench/peers.sh.
// One task, `post`, sends its job's payload with http.cjs; a throw fails the
// job and graphile-worker's default retry applies (max_attempts 25,
// exponential backoff).  Batching as the graphile-worker docs advise for
// throughput: a local queue and batched completion.
//
//   node gw.cjs TASK          a runner for the task TASK (post, bulk)
//   node gw.cjs otp           the runner of the task `otp`: no local queue (a
//                             new OTP must not wait behind a locked batch),
//                             GW_OTP_CONCURRENCY jobs at once, its own HTTP pool
//
// Environment: DATABASE_URL; GW_CONCURRENCY [512]; GW_LOCAL_QUEUE [512];
// GW_BATCH_DELAY_MS [5] (completeJobBatchDelay and failJobBatchDelay);
// GW_OTP_CONCURRENCY [16]; the settings of http.cjs.  Prints "ready" when
// every runner has started.
'use strict';
const { run } = require('graphile-worker');
const { post } = require('./http.cjs');

const env = (name, dflt) => Number(process.env[name] ?? dflt);
const concurrency = env('GW_CONCURRENCY', 512);
const localQueue = env('GW_LOCAL_QUEUE', 512);
const batchDelay = env('GW_BATCH_DELAY_MS', 5);
const send = async (payload) => { await post(payload); };
const sendOtp = async (payload) => { await post(payload, 'otp'); };

function runner(taskList, jobs, queue) {
	return run({
		connectionString: process.env.DATABASE_URL,
		concurrency: jobs,
		maxPoolSize: jobs + 2 > 10 ? 12 : 10,
		noHandleSignals: false,
		taskList,
		preset: {
			worker: {
				...(queue > 1 ? { localQueue: { size: queue } } : {}),
				completeJobBatchDelay: batchDelay,
				failJobBatchDelay: batchDelay,
			},
		},
	});
}

async function main() {
	const task = process.argv[2] || 'post';
	const r = task === 'otp'
		? await runner({ otp: sendOtp }, env('GW_OTP_CONCURRENCY', 16), 1)
		: await runner({ [task]: send }, concurrency, localQueue);
	console.log('ready');
	await r.promise;
}
main().catch((e) => { console.error(e); process.exit(1); });
