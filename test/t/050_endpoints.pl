# 050_endpoints.pl: customers' endpoints (notif_endpoint; sender/endpoints.c,
# core/endpoint_rules.c, http/sockets.c).  One webhook type serves two
# customers, each job going to its customer's url; a job for an unknown or
# disabled endpoint fails without a call; a customer's url that resolves to
# a loopback, private, link-local (cloud metadata) or IPv6 loopback address
# is refused at connect time, nothing reaching the simulator, unless
# notif_deliver.endpoint_allow_cidrs allows it; an endpoint that keeps
# failing for notif_deliver.endpoint_disable_after is disabled with a
# record, and a success clears its failures; its secrets reach no log.
use strict;
use warnings;
use lib 'test/lib/perl';
use NotifTest;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;

my $secret_a = 'whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw';
my $secret_b = 'whsec_QmFzZTY0U2VjcmV0Rm9yQ3VzdG9tZXJC';
my $secret_x = 'whsec_UmVmdXNlZFJvd1NlY3JldE5vdFNob3du';

# no allow-list at first: every special-purpose address is refused
my $node = new_node('endpoints',
	'notif_deliver.endpoint_disable_after' => "'4s'");
my $sim_a = start_sim();
my $sim_b = start_sim();
my $sim_doc = start_sim('--key-header', 'Webhook-Id');
my $dead_port = PostgreSQL::Test::Cluster::get_free_port();	# nobody listens

# a provider with no url of its own: everything but the url comes from it
sql($node, q{
	INSERT INTO notif_provider (name, format, idempotency_header, timeout, breaker_threshold)
	VALUES ('hooks', 'json', 'Idempotency-Key', '2 s', NULL);
	INSERT INTO notif_type (code, delivery, max_tries, provider, backoff_min, backoff_max, endpoint_by)
	VALUES ('hook', 'at_least_once', 100, 'hooks', '100 ms', '300 ms', 'customer'),
	       ('hook1', 'at_least_once', 1, 'hooks', '100 ms', '300 ms', 'customer'),
	       ('byuser', 'at_least_once', 30, 'hooks', '100 ms', '300 ms', 'user_id')});

sub endpoint
{
	my ($owner, $url, $secrets) = @_;
	$secrets = defined $secrets ? "'{$secrets}'" : 'NULL';
	sql($node, "INSERT INTO notif_endpoint (owner, url, secrets) VALUES ('$owner', '$url', $secrets)"
		  . " ON CONFLICT (owner) DO UPDATE SET url = excluded.url, secrets = excluded.secrets");
}

sub hook
{
	my ($kind, $user, $order, $customer) = @_;
	my $member = defined $customer ? qq("customer": "$customer", ) : '';
	return sql($node,
		qq{SELECT notif_enqueue($user, '$kind', '$order', '{${member}"event": "order.paid"}')});
}

sub final
{
	my ($id) = @_;
	wait_until($node, "SELECT status IN ('sent', 'failed') FROM notif_job WHERE id = $id");
	return sql($node, "SELECT status || ' ' || coalesce(outcome, '-') || ' ' || coalesce(last_error, '-') FROM notif_job WHERE id = $id");
}

sub received { my ($sim, $key) = @_; return (ledger($sim)->{$key} // { received => 0 })->{received}; }

# --- the table's checks: a refused row is not shown (it holds secrets) ---
my ($rc, $out, $err) = $node->psql('postgres',
	qq{INSERT INTO notif_endpoint (owner, url, secrets) VALUES ('x', 'ftp://example.com/', '{$secret_x}')});
like($err, qr/violates check constraint "notif_endpoint_url_check"/, 'an ftp:// url is refused');
unlike($err, qr/\Q$secret_x\E|Failing row/, 'and the refused row, its secret, is not shown');
($rc, $out, $err) = $node->psql('postgres',
	q{INSERT INTO notif_endpoint (owner, url, secrets) VALUES ('x', 'http://example.com/', '{not-a-whsec}')});
like($err, qr/notif_endpoint_secrets_check/, 'a secret that is not whsec_<base64> is refused');

# --- the rules, as the transport applies them (no allow-list) ---
is(sql($node, q{SELECT string_agg(a || ' ' || coalesce(notif_endpoint_refuses(a::inet), 'allowed'), E'\n' ORDER BY n)
	FROM unnest(ARRAY['127.0.0.1', '10.1.2.3', '172.16.0.1', '192.168.1.1', '169.254.169.254', '100.64.0.1',
	                  '0.0.0.0', '224.0.0.1', '255.255.255.255', '93.184.216.34', '::1', '::', 'fe80::1',
	                  'fd00::1', 'ff02::1', '::ffff:127.0.0.1', '::ffff:169.254.169.254', '64:ff9b::a00:1',
	                  '2002:7f00:1::', '2606:4700::1111']) WITH ORDINALITY AS t(a, n)}),
	join("\n",
		'127.0.0.1 loopback (127.0.0.0/8)',
		'10.1.2.3 private (10.0.0.0/8)',
		'172.16.0.1 private (172.16.0.0/12)',
		'192.168.1.1 private (192.168.0.0/16)',
		'169.254.169.254 link-local (169.254.0.0/16, cloud metadata included)',
		'100.64.0.1 shared address space (100.64.0.0/10)',
		'0.0.0.0 unspecified (0.0.0.0/8)',
		'224.0.0.1 multicast (224.0.0.0/4)',
		'255.255.255.255 reserved (240.0.0.0/4, broadcast included)',
		'93.184.216.34 allowed',
		'::1 loopback (::1)',
		':: unspecified (::)',
		'fe80::1 link-local (fe80::/10)',
		'fd00::1 unique local (fc00::/7)',
		'ff02::1 multicast (ff00::/8)',
		'::ffff:127.0.0.1 loopback (127.0.0.0/8)',
		'::ffff:169.254.169.254 link-local (169.254.0.0/16, cloud metadata included)',
		'64:ff9b::a00:1 private (10.0.0.0/8)',
		'2002:7f00:1:: loopback (127.0.0.0/8)',
		'2606:4700::1111 allowed'),
	'notif_endpoint_refuses: each special-purpose block, IPv4 inside IPv6 judged as IPv4');

# --- a customer's url to a refused address: no connection, last_error says why ---
my %refused = (
	loop => ["http://127.0.0.1:$sim_a->{port}/send", qr/destination refused before the call: 127\.0\.0\.1 is loopback/],
	ten => ['http://10.255.255.1:9/hook', qr/10\.255\.255\.1 is private \(10\.0\.0\.0\/8\)/],
	meta => ['http://169.254.169.254/latest/meta-data/', qr/169\.254\.169\.254 is link-local .*cloud metadata/],
	six => ["http://[::1]:$sim_a->{port}/send", qr/::1 is loopback \(::1\)/],
	name => ["http://localhost:$sim_a->{port}/send", qr/(127\.0\.0\.1|::1) is loopback/],
);
my %jobs;
for my $c (sort keys %refused)
{
	endpoint("r_$c", $refused{$c}[0]);
	$jobs{$c} = hook('hook1', 7, "r_$c", "r_$c");
}
for my $c (sort keys %refused)
{
	my $r = final($jobs{$c});
	like($r, qr/^failed unreached /, "$c: unreached, failed (no call made)");
	like($r, $refused{$c}[1], "$c: last_error names the address and the rule");
	is(received($sim_a, "hook1:7:r_$c"), 0, "$c: nothing reached the simulator") if $c =~ /loop|six|name/;
}
like(final($jobs{name}), qr/localhost|is loopback/, 'localhost is refused after resolution, by the address it resolved to');

# --- the allow-list lets loopback through (reload) ---
$node->append_conf('postgresql.conf', "notif_deliver.endpoint_allow_cidrs = '127.0.0.1/32, ::1/128'\n");
$node->reload;
is(sql($node, q{SELECT notif_endpoint_refuses('127.0.0.1') IS NULL AND notif_endpoint_refuses('::ffff:127.0.0.1') IS NULL
	AND notif_endpoint_refuses('10.0.0.1') IS NOT NULL}), 't',
	'the allow-list allows 127.0.0.1 (also IPv4-mapped), not the rest');

# --- two customers, one type: each job to its own endpoint ---
endpoint('acme', $sim_a->{url}, $secret_a);
endpoint('globex', $sim_b->{url}, $secret_b);
my @a = map { hook('hook', 1, "a$_", 'acme') } 1 .. 3;
my @b = map { hook('hook', 2, "b$_", 'globex') } 1 .. 2;
like(final($_), qr/^sent accepted/, "job $_ sent") for @a, @b;
is(join(',', map { received($sim_a, "hook:1:a$_") } 1 .. 3), '1,1,1', "acme's jobs reached acme's endpoint");
is(join(',', map { received($sim_b, "hook:2:b$_") } 1 .. 2), '1,1', "globex's reached globex's");
is(join(',', map { received($sim_b, "hook:1:a$_") } 1 .. 3) . ' ' . join(',', map { received($sim_a, "hook:2:b$_") } 1 .. 2),
	'0,0,0 0,0', 'and none the other\'s');
my $req = last_request($sim_a, 'hook:1:a1');
is($req->{body}, '{"event": "order.paid", "customer": "acme"}', 'the body is the payload, as the provider\'s format makes it');
is(headers_of($req)->{'Idempotency-Key'}, 'hook:1:a1', 'with the provider\'s idempotency header');

# by user_id
endpoint('3', $sim_b->{url});
my $u = hook('byuser', 3, 'u1');
like(final($u), qr/^sent accepted/, 'endpoint_by user_id: sent');
is(received($sim_b, 'byuser:3:u1'), 1, 'to the endpoint of its user_id');

# the allowed hostname now goes through (resolved to an allowed address)
endpoint('r_name2', "http://localhost:$sim_a->{port}/send");
like(final(hook('hook', 7, 'ok_name', 'r_name2')), qr/^sent accepted/, 'localhost with the allow-list: sent');
is(received($sim_a, 'hook:7:ok_name'), 1, 'and it reached the simulator');

# --- doc/providers.md's per-customer webhook, pointed at the simulator ---
(my $doc = doc_sql('doc/providers.md', 'endpoints')) =~ s{https://hooks\.acme\.example/notif}{$sim_doc->{url}} or die;
$doc =~ s/'acme'/'doc_acme'/g; $doc =~ s/"acme"/"doc_acme"/g;
my $doc_job = sql($node, $doc);
like(final($doc_job), qr/^sent accepted/, 'the documented webhook per customer was sent');
$req = last_request($sim_doc, 'order_event:812:order-55001-paid');
is($req->{body}, '{"type": "order.paid", "order": 55001, "customer": "doc_acme"}', 'with the documented body');
is(headers_of($req)->{'Webhook-Id'}, 'order_event:812:order-55001-paid', 'and the documented header');

# --- an unknown or disabled endpoint: failed, no call ---
like(final(hook('hook', 1, 'nobody', 'initech')), qr/^failed rejected no call: no endpoint is registered for "initech"/,
	'an unknown endpoint: failed, rejected, last_error says so');
like(final(hook('hook', 1, 'nomember')), qr/^failed rejected no call: the payload has no member "customer"/,
	'a payload without the member: failed, saying so');
sql($node, q{UPDATE notif_endpoint SET enabled = false WHERE owner = 'globex'});
like(final(hook('hook', 2, 'off', 'globex')), qr/^failed rejected no call: the endpoint of "globex" is disabled/,
	'a disabled endpoint: failed, rejected, last_error says so');
is(received($sim_b, 'hook:2:off'), 0, 'nothing was sent');
sql($node, q{UPDATE notif_endpoint SET enabled = true WHERE owner = 'globex'});

# --- auto-disable: failing for endpoint_disable_after (4 s), then a record ---
endpoint('dying', "http://127.0.0.1:$dead_port/hook");
my $d = hook('hook', 4, 'd1', 'dying');
ok(wait_until($node, q{SELECT failing_since IS NOT NULL FROM notif_endpoint_status WHERE owner = 'dying'}),
	'a failed call: failing_since is set');
# a success clears it
endpoint('dying', $sim_a->{url});
ok(wait_until($node, "SELECT status = 'sent' FROM notif_job WHERE id = $d"), 'the job was sent once the url works');
is(sql($node, q{SELECT failing_since IS NULL AND enabled FROM notif_endpoint_status WHERE owner = 'dying'}), 't',
	'a success cleared failing_since');
endpoint('dying', "http://127.0.0.1:$dead_port/hook");
$d = hook('hook', 4, 'd2', 'dying');
ok(wait_until($node, q{SELECT NOT enabled FROM notif_endpoint_status WHERE owner = 'dying'}),
	'failing for longer than endpoint_disable_after: disabled');
is(sql($node, q{SELECT disabled_at >= failing_since + interval '4 s' AND disabled_reason LIKE '%endpoint_disable_after (00:00:04)%'
	FROM notif_endpoint_status WHERE owner = 'dying'}), 't', 'with disabled_at and its reason in notif_endpoint_status');
like(final($d), qr/^failed rejected no call: the endpoint of "dying" is disabled: its calls failed/,
	'its job then failed without a call, saying why');
my $log = slurp_file($node->logfile);
my @warnings = $log =~ /WARNING:  notif_deliver: the endpoint of "dying" is disabled/g;
is(scalar @warnings, 1, 'one WARNING in the log');
sql($node, q{UPDATE notif_endpoint SET enabled = true WHERE owner = 'dying'});
is(sql($node, q{SELECT enabled AND failing_since IS NULL AND disabled_at IS NULL AND disabled_reason IS NULL
	FROM notif_endpoint_status WHERE owner = 'dying'}), 't', 'enabled again: its record starts afresh');

# --- who may read secrets ---
sql($node, q{
	CREATE ROLE app LOGIN;
	GRANT INSERT (owner, url, secrets), UPDATE (url, secrets, enabled),
	      SELECT (owner, url, enabled, created, failing_since, disabled_at, disabled_reason)
	   ON notif_endpoint TO app});
is($node->safe_psql('postgres', qq{SET ROLE app; INSERT INTO notif_endpoint (owner, url, secrets) VALUES ('app1', 'https://example.com/', '{$secret_b}'); SELECT count(*) FROM notif_endpoint WHERE owner = 'app1'}),
	'1', 'an application role granted columns registers an endpoint with its secrets');
($rc, $out, $err) = $node->psql('postgres', q{SET ROLE app; SELECT secrets FROM notif_endpoint});
like($err, qr/permission denied/, 'but cannot read secrets back');

is(sql($node, q{SELECT has_table_privilege('pg_monitor', 'notif_endpoint_status', 'SELECT')
	AND NOT has_table_privilege('pg_monitor', 'notif_endpoint', 'SELECT')}), 't',
	'pg_monitor reads notif_endpoint_status, not notif_endpoint');

# --- secrets reach no log, no job, no call record ---
# (the test's own statements, which set them, are logged by log_statement =
# all, and a failed one as STATEMENT: aside)
my $whole_log = slurp_file($node->logfile);
like($whole_log, qr/\Q$secret_a\E/, 'the secret needle is found where it is (the test\'s own INSERT, logged)');
($log = $whole_log) =~ s/^[^\n]*(LOG:  statement|STATEMENT): [^\n]*(\n\t[^\n]*)*//mg;
unlike($log, qr/\Q$secret_a\E|\Q$secret_b\E|\Q$secret_x\E/, 'no secret elsewhere in the server log');
is(sql($node, qq{SELECT count(*) FROM notif_job j LEFT JOIN notif_calls c ON c.job_id = j.id
	WHERE j::text LIKE '%whsec_%' OR c::text LIKE '%whsec_%'}), '0', 'nor in notif_job or notif_calls');

done_testing();
