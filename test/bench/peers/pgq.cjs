// test/bench/peers/pgq.cjs: a PgQ consumer for test/bench/peers.sh, the loop
// PgQ's docs describe: pgq.next_batch, pgq.get_batch_events, send every
// event (PGQ_CONCURRENCY at a time, with http.cjs), then in one transaction
// pgq.event_retry (in 1 s) for each event whose call failed and had fewer
// than 3 tries, and pgq.finish_batch.  PgQ keeps no per-event state: a
// consumer that dies before finish_batch gets the same batch again.
//
//   node pgq.cjs QUEUE[:CONSUMER]...    one loop per queue (consumer "bench")
//
// Environment: DATABASE_URL; PGQ_CONCURRENCY [512]; PGQ_IDLE_MS [50] (the
// sleep when there is no batch); the settings of http.cjs.  Prints "ready".
'use strict';
const { Client } = require('pg');
const { post, eachLimit } = require('./http.cjs');

const concurrency = Number(process.env.PGQ_CONCURRENCY || 512);
const idle = Number(process.env.PGQ_IDLE_MS || 50);
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

async function consume(queue, consumer) {
	const db = new Client({ connectionString: process.env.DATABASE_URL });
	await db.connect();
	for (;;) {
		const { rows: [{ b }] } = await db.query('SELECT pgq.next_batch($1, $2) AS b', [queue, consumer]);
		if (b === null) { await sleep(idle); continue; }
		const { rows: events } = await db.query(
			'SELECT ev_id, ev_retry, ev_data FROM pgq.get_batch_events($1)', [b]);
		const retry = [];
		await eachLimit(events, concurrency, async (ev) => {
			try { await post(JSON.parse(ev.ev_data), queue === 'otp' ? 'otp' : 'bulk'); }
			catch (e) { if ((ev.ev_retry || 0) < 2) retry.push(ev.ev_id); }
		});
		await db.query('BEGIN');
		if (retry.length)
			await db.query('SELECT count(pgq.event_retry($1, e, 1)) FROM unnest($2::bigint[]) e', [b, retry]);
		await db.query('SELECT pgq.finish_batch($1)', [b]);
		await db.query('COMMIT');
	}
}

const loops = process.argv.slice(2).map((a) => {
	const [queue, consumer = 'bench'] = a.split(':');
	return consume(queue, consumer);
});
console.log('ready');
Promise.all(loops).catch((e) => { console.error(e); process.exit(1); });
