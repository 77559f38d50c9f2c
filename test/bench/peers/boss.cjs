// test/bench/peers/boss.cjs: pg-boss's worker (and bulk enqueue) for
// test/bench/peers.sh.  Each queue gets BOSS_LOOPS loops fetching batches
// of BOSS_BATCH jobs (boss.fetch, as boss.work() does), polling at pg-boss's
// minimum (0.5 s); a loop sends every job of the batch with http.cjs, then
// completes those whose call succeeded (boss.complete) and fails the others
// (boss.fail), so that pg-boss's default retry (retryLimit 2, no delay)
// applies to those alone.
//
//   node boss.cjs work QUEUE...          work the queues (created if missing)
//   node boss.cjs enqueue QUEUE N PREFIX     boss.insert() N jobs in one
//                                        statement; then prints the epoch (s)
//                                        and pg_current_wal_lsn()
//
// Environment: DATABASE_URL; BOSS_LOOPS [4]; BOSS_BATCH [5000]; per queue
// BOSS_BATCH_<QUEUE> and BOSS_LOOPS_<QUEUE> override them; the settings of
// http.cjs.  Prints "ready" when every loop has started.
'use strict';
const PgBoss = require('pg-boss');

const env = (name, dflt) => Number(process.env[name] ?? dflt);

// One fetch loop, as boss.work() runs it (fetch again at once after a
// batch, its completion not awaited, else poll every 0.5 s), but
// completing only the batch's jobs whose call succeeded and failing the
// others: boss.work() completes the whole
// batch after its handler, without awaiting it, so a job failed by the
// handler and fetched again at once by another loop (retry, no delay) was
// completed under that loop, and the two loops' completions could deadlock,
// which (an unhandled rejection) killed the worker; seen once in a full run.
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));
async function settle(what) {	// retry a completion the database chose as a deadlock victim
	for (let i = 0; ; i++) {
		try { return await what(); } catch (e) {
			if (e.code !== '40P01' || i >= 5) throw e;
		}
	}
}
async function loop(boss, queue, batchSize, post) {
	for (;;) {
		let jobs;
		try {
			jobs = await boss.fetch(queue, { batchSize });
		} catch (e) {
			console.error('pg-boss fetch:', e.message);
			await sleep(500);
			continue;
		}
		if (!jobs || !jobs.length) { await sleep(500); continue; }
		const ok = [], failed = [];
		await Promise.all(jobs.map((j) => post(j.data, queue === 'otp' ? 'otp' : 'bulk')
			.then(() => ok.push(j.id), () => failed.push(j.id))));
		// not awaited before the next fetch, as boss.work() does not either
		(async () => {
			if (ok.length) await settle(() => boss.complete(queue, ok));
			if (failed.length) await settle(() => boss.fail(queue, failed));
		})().catch((e) => console.error('pg-boss completion:', e.message));
	}
}

async function main() {
	const [mode, ...args] = process.argv.slice(2);
	const boss = new PgBoss({ connectionString: process.env.DATABASE_URL, schedule: false,
		supervise: mode === 'work', max: 10 });
	boss.on('error', (e) => console.error('pg-boss error:', e.message));
	await boss.start();
	if (mode === 'enqueue') {
		const [queue, n, prefix] = args;
		await boss.createQueue(queue);
		const jobs = [];
		for (let i = 1; i <= Number(n); i++)
			jobs.push({ name: queue, data: { k: `${prefix}:${i}`, to: '+84900000000', text: 'hello' } });
		await boss.insert(jobs);
		const at = (Date.now() / 1000).toFixed(6);
		const { rows: [{ lsn }] } = await boss.getDb().executeSql('SELECT pg_current_wal_lsn() AS lsn');
		console.log(`${at} ${lsn}`);
		await boss.stop({ graceful: false, wait: false });
		process.exit(0);
	}
	const { post } = require('./http.cjs');
	for (const queue of args) {
		await boss.createQueue(queue);
		const loops = env(`BOSS_LOOPS_${queue.toUpperCase()}`, env('BOSS_LOOPS', 4));
		const batchSize = env(`BOSS_BATCH_${queue.toUpperCase()}`, env('BOSS_BATCH', 5000));
		for (let i = 0; i < loops; i++) {
			// the loops' polls spread over the interval, not all at once
			if (i > 0) await new Promise((r) => setTimeout(r, 500 / loops));
			loop(boss, queue, batchSize, post);
		}
	}
	console.log('ready');
}
main().catch((e) => { console.error(e); process.exit(1); });
