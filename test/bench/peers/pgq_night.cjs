// test/bench/peers/pgq_night.cjs: the PgQ consumer of the night through the
// peer (test/bench/night_peers.sh): the loop of peers/pgq.cjs (a batch,
// get_batch_events, send every event, then event_retry for the failed ones
// and finish_batch in one transaction; batches as below) against the night's two providers
// over TLS, with notif_deliver's per-type rules of the night:
//   promo_sms, promo_push  at most once: a call that certainly did not
//                          reach the provider (connection refused or not
//                          established in time, or a 429 answer) is
//                          retried, 3 tries in all; an ambiguous one (a
//                          timeout after the request was sent, a reset, a
//                          5xx answer) never
//   alert                  at least once, 5 tries
//   otp                    at least once, 3 tries, and not sent once 15 s
//                          old (from the event's time: notif_deliver's
//                          deadline), a retry neither
// A retry is event_retry in 1 s.  An event given up (refused with a 4xx, or
// its tries used up by calls that certainly failed, or by any calls for
// alert and otp) or expired is printed, "gave_up KEY WHY" or "expired KEY",
// for the script to count: PgQ keeps no record of either; so is a call
// left ambiguous, "unknown KEY WHY".
//
//   node pgq_night.cjs QUEUE      one loop on QUEUE (consumer "bench"):
//                                 night_bulk, night_alert or night_otp
//
// The HTTP clients: undici.request, each provider its own Agent, as each of
// notif_deliver's provider rows has its connections:
//   promo_sms   HTTP/1.1 keep-alive, NIGHT_SMS_CONNECTIONS [1500] connections
//   promo_push  HTTP/2 (allowH2: the front offers h2), NIGHT_PUSH_CONNECTIONS
//               [16] connections of NIGHT_PUSH_STREAMS [100] streams (undici's
//               pipelining is the cap on streams per connection, and it runs
//               a request it is not told is idempotent alone on its
//               connection: measured here, 90 calls/s over 16 connections
//               without idempotent, 4,000/s with it)
//   alert, otp  HTTP/1.1 keep-alive, NIGHT_SMALL_CONNECTIONS [256] each
// all trusting the throwaway CA in NIGHT_CA (a PEM file), every call timed
// out after NIGHT_TIMEOUT_MS [3000] (connect, headers, body).
//
// Batches: a consumer lagging behind takes what is waiting in one batch,
// up to PGQ_BATCH [20000] events (pgq.next_batch_custom with min_count the
// events past its last tick, at most PGQ_BATCH: the batch ends at the
// queue's last tick, or at the first tick that makes PGQ_BATCH), not a
// tick at a time as pgq.next_batch does.  A batch is finished once its
// slowest call is over, so a batch with a call the provider holds takes the
// whole timeout: at the night's rate the bulk batch must hold about rate x
// timeout events for the consumer to keep up, and a tick's worth (a tenth
// of a second) would not.  PGQ_CONCURRENCY [3000 for night_bulk, 256 for
// the others] calls in flight per batch.
//
// Environment: DATABASE_URL, NIGHT_SMS_URL, NIGHT_PUSH_URL, NIGHT_CA and the
// settings above; PGQ_IDLE_MS [50] (the sleep when there is no batch);
// NIGHT_WARM [1]: before consuming, open the agents' connections, as a
// long-running worker has them open (a first batch of 20,000 events would
// otherwise open 1,500 TLS connections at once: Node's single thread then
// spent 18 s on the handshakes here, its calls timing out meanwhile).
// Prints "ready" once connected to the database, "warm" once its
// connections are open.
'use strict';
const fs = require('fs');
const { Client } = require('pg');
const { Agent, request } = require('undici');
const { eachLimit } = require('./http.cjs');

const queue = process.argv[2];
const bulk = queue === 'night_bulk';
const env = (k, d) => Number(process.env[k] || d);
const timeout = env('NIGHT_TIMEOUT_MS', 3000);
const concurrency = env('PGQ_CONCURRENCY', bulk ? 3000 : 256);
const minCount = env('PGQ_BATCH', 20000);
const idle = env('PGQ_IDLE_MS', 50);
const ca = fs.readFileSync(process.env.NIGHT_CA);
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

const agent = (opts) => new Agent({
	pipelining: 1,
	keepAliveTimeout: 60000,
	headersTimeout: timeout,
	bodyTimeout: timeout,
	connect: { ca, timeout },
	...opts,
});
const sms = process.env.NIGHT_SMS_URL;
const push = process.env.NIGHT_PUSH_URL;
const streams = env('NIGHT_PUSH_STREAMS', 100);
// kind: [url, agent, tries, retry an ambiguous call, deadline ms, HTTP/2, calls the agent takes at once]
const small = env('NIGHT_SMALL_CONNECTIONS', 256);
const smsConns = env('NIGHT_SMS_CONNECTIONS', 1500);
const pushConns = env('NIGHT_PUSH_CONNECTIONS', 16);
const rules = {
	night_bulk: {
		promo_sms: [sms, agent({ connections: smsConns }), 3, false, 0, false, smsConns],
		promo_push: [push, agent({ connections: pushConns, allowH2: true, maxConcurrentStreams: streams,
			pipelining: streams }), 3, false, 0, true, pushConns * streams],
	},
	night_alert: { alert: [sms, agent({ connections: small }), 5, true, 0, false, small] },
	night_otp: { otp: [sms, agent({ connections: small }), 3, true, 15000, false, small] },
}[queue];
// errors that say the request never reached the provider
const unreached = new Set(['ECONNREFUSED', 'UND_ERR_CONNECT_TIMEOUT', 'ENETUNREACH', 'EHOSTUNREACH']);

// one event: 'ok', 'retry' or 'drop'
async function send(ev) {
	const [url, dispatcher, tries, ambiguousToo, deadline, h2] = rules[ev.ev_type];
	const { k, b } = JSON.parse(ev.ev_data);
	if (deadline && Date.now() - ev.ev_time.getTime() > deadline) {
		console.log(`expired ${k}`);
		return 'drop';
	}
	let retry, why;
	try {
		const res = await request(url, {
			// (idempotent: else undici runs one POST at a time on an HTTP/2
			// connection; the key makes it so, and the ledger would show a copy)
			method: 'POST', idempotent: !!h2, dispatcher,
			headers: { 'content-type': 'application/json', 'idempotency-key': k },
			body: b,
		});
		await res.body.dump();
		const st = res.statusCode;
		if (st >= 200 && st <= 299) return 'ok';
		// as notif_deliver reads an answer: 429 not acted on, 5xx ambiguous
		// (a front's 502 may follow a call the provider took), other 4xx
		// refused for good
		retry = st === 429 || (st >= 500 && ambiguousToo);
		why = st;
	} catch (e) {
		retry = ambiguousToo || unreached.has(e.code);
		why = e.code || e.message;
	}
	if (retry && (ev.ev_retry || 0) + 1 < tries) return 'retry';
	// tries used up, or refused; an ambiguous promotion is not retried, and
	// not given up either (notif_deliver records it sent, its outcome unknown)
	if (retry || typeof why === 'number' && why < 500) console.log(`gave_up ${k} ${why}`);
	else console.log(`unknown ${k} ${why}`);	// sent, its outcome unknown
	return 'drop';
}

// open every agent's connections, as a long-running worker has them: as many
// calls at once as the agent takes (keys warm:QUEUE:I, of no night's type)
async function warm() {
	let i = 0;
	await Promise.all(Object.values(rules).map(([url, dispatcher, , , , , n]) =>
		eachLimit(Array(n).fill(0), n, async () => {
			try {
				const res = await request(url, { method: 'POST', idempotent: true, dispatcher, body: '{}',
					headers: { 'content-type': 'application/json', 'idempotency-key': `warm:${queue}:${i++}` } });
				await res.body.dump();
			} catch (e) { /* held: the timeout */ }
		})));
}

async function consume() {
	const db = new Client({ connectionString: process.env.DATABASE_URL });
	await db.connect();
	console.log('ready');
	if (process.env.NIGHT_WARM !== '0') await warm();
	console.log('warm');
	for (;;) {
		const b = (await db.query(`SELECT batch_id FROM pgq.next_batch_custom($1, 'bench', NULL,
			(SELECT least(greatest(pending_events, 1), $2)::int4 FROM pgq.get_consumer_info($1, 'bench')), NULL)`,
			[queue, minCount])).rows[0].batch_id;
		if (b === null) { await sleep(idle); continue; }
		const { rows: events } = await db.query(
			'SELECT ev_id, ev_time, ev_type, ev_retry, ev_data FROM pgq.get_batch_events($1)', [b]);
		const retry = [];
		await eachLimit(events, concurrency, async (ev) => {
			if (await send(ev) === 'retry') retry.push(ev.ev_id);
		});
		await db.query('BEGIN');
		if (retry.length)
			await db.query('SELECT count(pgq.event_retry($1, e, 1)) FROM unnest($2::bigint[]) e', [b, retry]);
		await db.query('SELECT pgq.finish_batch($1)', [b]);
		await db.query('COMMIT');
	}
}

consume().catch((e) => { console.error(e); process.exit(1); });
