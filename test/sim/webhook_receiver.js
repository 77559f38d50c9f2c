// webhook_receiver.js: a webhook receiver that verifies every request it
// gets with the Standard Webhooks reference library (npm standardwebhooks,
// installed by test/deps.sh into NOTIF_NPM_DIR), as a customer's endpoint
// would, and keeps what it saw.  For test/t/048_webhook_signing.pl.
//
//   node webhook_receiver.js PORT SECRET...
//
// Each SECRET (whsec_...) is a key the receiver may hold: every request is
// verified with each one alone, and the results are kept per request.
//
// Any path but those below is a webhook: answered 200, unless it asks for
// a fault as the provider simulator's requests do (X-Sim-Fault: timeout,
// the request held unanswered; or reset, the connection closed unanswered;
// or an HTTP status) for the first X-Sim-Fail-First receipts of its
// webhook-id.
//
//   GET /health          "ok"
//   GET /requests        the requests, a JSON array: {n, method, url,
//                        headers, body (base64), verified: [per SECRET],
//                        errors: [per SECRET]}
//   GET /verify?n=N&secret=I&shift=S&tamper=1
//                        request N verified again with SECRET I, the
//                        verifier's clock S seconds later, the body's first
//                        byte changed if tamper: {verified, error}
'use strict';
const http = require('http');
const path = require('path');
const { Webhook } = require(path.join(process.env.NOTIF_NPM_DIR || '/var/cache/notif_deliver/npm',
	'node_modules', 'standardwebhooks'));

const port = Number(process.argv[2]);
const secrets = process.argv.slice(3);
const requests = [];
const receipts = new Map();		// webhook-id -> how many

function verify(secret, body, headers, shift) {
	const realNow = Date.now;
	if (shift)
		Date.now = () => realNow() + shift * 1000;
	try {
		new Webhook(secret).verify(body, headers, { jsonParse: false });
		return { verified: true, error: null };
	} catch (e) {
		return { verified: false, error: e.message };
	} finally {
		Date.now = realNow;
	}
}

function answer(res, status, body) {
	const text = Buffer.from(typeof body === 'string' ? body : JSON.stringify(body));
	res.writeHead(status, { 'Content-Type': 'application/json', 'Content-Length': text.length });
	res.end(text);
}

http.createServer((req, res) => {
	const chunks = [];
	req.on('data', (c) => chunks.push(c));
	req.on('end', () => {
		const url = new URL(req.url, 'http://127.0.0.1');
		const body = Buffer.concat(chunks);
		if (url.pathname === '/health')
			return answer(res, 200, 'ok');
		if (url.pathname === '/requests')
			return answer(res, 200, requests);
		if (url.pathname === '/verify') {
			const r = requests[Number(url.searchParams.get('n')) - 1];
			if (!r)
				return answer(res, 404, { error: 'no such request' });
			const b = Buffer.from(r.body, 'base64');
			if (url.searchParams.get('tamper') && b.length > 0)
				b[0] = b[0] === 0x41 ? 0x42 : 0x41;
			return answer(res, 200, verify(secrets[Number(url.searchParams.get('secret') || 0)], b,
				r.headers, Number(url.searchParams.get('shift') || 0)));
		}
		const results = secrets.map((s) => verify(s, body, req.headers, 0));
		requests.push({
			n: requests.length + 1, method: req.method, url: req.url, headers: req.headers,
			body: body.toString('base64'),
			verified: results.map((r) => r.verified), errors: results.map((r) => r.error),
		});
		const id = req.headers['webhook-id'] || '';
		const seen = (receipts.get(id) || 0) + 1;
		receipts.set(id, seen);
		const fault = req.headers['x-sim-fault'];
		if (fault && seen <= Number(req.headers['x-sim-fail-first'] || 0)) {
			if (fault === 'timeout')
				return setTimeout(() => res.destroy(), 60000);
			if (fault === 'reset')
				return res.destroy();
			return answer(res, Number(fault), { error: 'fault' });
		}
		answer(res, 200, { ok: true });
	});
}).listen(port, '127.0.0.1');
