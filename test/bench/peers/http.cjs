// test/bench/peers/http.cjs: the HTTP client of every peer's worker in
// test/bench/peers.sh: undici.request over one keep-alive Agent, the
// fastest client Node has (Node's fetch costs about four times the CPU per
// request, which would flatter notif_deliver).  post() sends one message
// with its idempotency key and resolves on a 2xx answer; any other answer,
// a timeout or a reset rejects, so that the peer's own retry rules apply.
//
// Two pools, as notif_deliver has a provider row per lane in the flood
// run: "bulk" (every queue but otp) and "otp".
//
// Environment: PEER_URL (the simulator's /send), PEER_CONNECTIONS [512]
// (the cap on requests in flight of the bulk pool, as notif_deliver's
// max_inflight), PEER_OTP_CONNECTIONS [64], PEER_TIMEOUT_MS [5000] (headers
// and body timeout of a call, as the provider timeout of notif_deliver).
'use strict';
const { Agent, request } = require('undici');

const url = process.env.PEER_URL;
const timeout = Number(process.env.PEER_TIMEOUT_MS || 5000);
const connections = Number(process.env.PEER_CONNECTIONS || 512);
const pool = (n) => new Agent({
	connections: n,
	pipelining: 1,
	keepAliveTimeout: 60000,
	headersTimeout: timeout,
	bodyTimeout: timeout,
	connect: { timeout },
});
const agents = { bulk: pool(connections), otp: pool(Number(process.env.PEER_OTP_CONNECTIONS || 64)) };

// payload: { k: key, to, text }; the body is the same bytes on every try
async function post(payload, lane = 'bulk') {
	const res = await request(url, {
		method: 'POST',
		dispatcher: agents[lane],
		headers: { 'content-type': 'application/json', 'idempotency-key': payload.k },
		body: JSON.stringify({ to: payload.to, text: payload.text }),
	});
	await res.body.dump();
	if (res.statusCode < 200 || res.statusCode > 299)
		throw new Error(`provider answered ${res.statusCode}`);
}

// run fn over items with at most `limit` of them pending at once
async function eachLimit(items, limit, fn) {
	let next = 0;
	async function lane() {
		while (next < items.length) {
			const item = items[next++];
			await fn(item);
		}
	}
	const lanes = [];
	for (let i = 0; i < Math.min(limit, items.length); i++) lanes.push(lane());
	await Promise.all(lanes);
}

module.exports = { post, eachLimit, connections, settings: { connections, timeout } };
