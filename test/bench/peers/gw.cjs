// test/bench/peers/gw.cjs: graphile-worker's worker for test/bench/peers.sh.
// One task, `post`, sends its job's payload with http.cjs; a throw fails the
// job and graphile-worker's default retry applies (max_attempts 25,
// exponential backoff).  Batching as the graphile-worker docs advise for
// throughput: a local queue and batched completion.
//
//   node gw.cjs TASK          a runner for the task TASK (post, bulk)
//   node gw.cjs flood         one runner for the tasks `bulk` and `otp` (the
//                             OTP jobs are added with a higher priority; their
//                             calls use the OTP HTTP pool)
//   node gw.cjs otp           a runner for `otp` alone, to run beside `gw.cjs
//                             bulk`: no local queue (a new OTP must not wait
//                             behind a locked batch), GW_OTP_CONCURRENCY jobs
//                             at once.  graphile-worker has no parallel queues:
//                             such a runner scans the bulk backlog on every
//                             fetch that finds no OTP (its jobs index is by
//                             priority and run_at, not task)
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
		// with a local queue and batched completion a job holds no connection
		// (a few serve the fetches and the batched updates); without, the
		// docs' advice: concurrency + 2
		maxPoolSize: queue > 1 ? 12 : Math.max(10, jobs + 2),
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
	let r;
	if (task === 'otp')
		r = await runner({ otp: sendOtp }, env('GW_OTP_CONCURRENCY', 16), 1);
	else
		r = await runner(task === 'flood' ? { bulk: send, otp: sendOtp } : { [task]: send }, concurrency, localQueue);
	console.log('ready');
	await r.promise;
}
main().catch((e) => { console.error(e); process.exit(1); });
