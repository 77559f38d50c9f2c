#!/usr/bin/perl
# push_sim.pl: a Google token endpoint, an FCM HTTP v1 endpoint and an APNs
# endpoint, as one small HTTP/1.1 server for the push tests
# (test/t/020_push.pl) and the HTTP/2 benchmark.  It runs behind nghttpx,
# which terminates TLS and HTTP/2 and says so in "Via: 2 nghttpx".
#
#   POST /token                       verifies the RS256 assertion with the
#       service account's public key (iss, scope, aud, iat, exp), issues an
#       access token valid --token-life seconds
#   POST /v1/projects/P/messages:send checks the bearer token (401
#       UNAUTHENTICATED unless issued and unexpired); FCM error bodies for
#       chosen tokens: dead* 404 UNREGISTERED, bad* 400 INVALID_ARGUMENT,
#       quota* 429 QUOTA_EXCEEDED (no Retry-After), long* 400 with an
#       error.status of "x" and 150 "é" (301 bytes of UTF-8)
#   POST /3/device/T                  verifies the ES256 provider token
#       (alg, kid, iss, signature in the JOSE r||s form) and its age: 403
#       ExpiredProviderToken once iat is older than --apns-max-age, 403
#       InvalidProviderToken for a bad one; chosen device tokens: dead* 410
#       Unregistered (with a timestamp; deadbeef* with 1e30 as its
#       timestamp), bad0* 400 BadDeviceToken, c0de* 429 TooManyRequests
#       with Retry-After (the first time each), 0bad* 502 with a body that
#       is not text (bytes 0xff 0xfe, then an HTML page with a UTF-8 "é"),
#       fa7* 400 BadDeviceToken after 4 MB of padding
#   POST /hook/N                      a plain webhook: 200 {"ok":true}
#
# Control: GET /stats (counters, "name value" lines), GET /ledger (a line
# per FCM token or APNs device token called: "TOKEN received accepted 1
# first_us last_us", the shape of provider_sim's ledger, times of the calls
# accepted in microseconds since the epoch), GET /secrets (every
# access token issued and provider token seen, one a line: for the test to
# look for them where they must not be), POST /revoke (forget the issued
# access tokens: the next FCM call is a 401), POST /release-tokens (see
# --token-hold), POST /expires-in/VALUE (the token endpoint's expires_in
# is the JSON text VALUE from then on, e.g. 1e30 or -5; POST /expires-in/
# goes back to the tokens' life), POST /token-life/N (access tokens issued
# from then on live N seconds, and say so; POST /token-life/ goes back to
# --token-life; the counter last_token_life is the last one's), POST
# /token-suffix/TEXT (TEXT, percent-decoded, is appended to each access
# token in the token endpoint's answers from then on: the token issued, which FCM accepts, is the one without it;
# POST /token-suffix/ ends it), POST /retry-after/TEXT (APNs' 429 says
# Retry-After: TEXT, percent-decoded, from then on), POST /delay-ms/N
# (--delay-ms from then on; answers already held keep theirs).  The
# counter "injected" counts requests that carried an X-Injected header.
# Answers can be held --delay-ms, so that many calls are in flight at
# once; with --token-hold 1, the token endpoint's are held until POST
# /release-tokens (token_answers counts those written).  It logs no
# header, token or body.
use strict;
use warnings;
use Getopt::Long;
use IO::Socket::INET;
use IO::Select;
use Socket qw(IPPROTO_TCP TCP_NODELAY SOL_SOCKET SO_REUSEADDR);
use Time::HiRes qw(time);
use MIME::Base64 qw(decode_base64url encode_base64url);
use JSON::PP;
use Crypt::PK::RSA;
use Crypt::PK::ECC;

my %o = (port => 0, 'token-life' => 3, 'apns-max-age' => 3600, 'delay-ms' => 0,
	'retry-after' => 2, email => 'notif@demo.iam.gserviceaccount.com', kid => 'KEYID12345',
	team => 'TEAMID1234', 'token-uri' => '');
GetOptions(\%o, 'port=i', 'google-key=s', 'apns-key=s', 'token-life=i', 'apns-max-age=i',
	'delay-ms=i', 'token-hold=i', 'retry-after=s', 'email=s', 'kid=s', 'team=s', 'token-uri=s')
  or die "usage: push_sim.pl --port N --google-key PUB --apns-key PUB [...]\n";
my $rsa = $o{'google-key'} ? Crypt::PK::RSA->new($o{'google-key'}) : undef;
my $ecc = $o{'apns-key'} ? Crypt::PK::ECC->new($o{'apns-key'}) : undef;
my $json = JSON::PP->new->canonical;

my %stat = map { $_ => 0 } qw(requests http2 http1 token_requests tokens_issued token_answers hooks
  assertions_bad fcm_calls fcm_accepted fcm_unauthenticated apns_calls apns_accepted
  apns_jwt_verified apns_jwt_bad apns_expired_answers apns_expired_tokens
  inflight max_inflight injected last_token_life);
my %issued;        # access token => expiry (epoch s)
my %jwt_seen;      # APNs provider token => 1 (verified) or 0 (bad)
my %expired_jwt;   # provider tokens answered ExpiredProviderToken
my %throttled;     # device tokens answered 429 once
my %ledger;        # FCM or APNs token => [received, accepted, first_us, last_us]
my $msg_id = 0;

my $listen = IO::Socket::INET->new(LocalAddr => '127.0.0.1', LocalPort => $o{port},
	Listen => 1024, ReuseAddr => 1, Blocking => 0) or die "listen: $!";
$SIG{TERM} = sub { exit 0 };
print "push_sim listening on 127.0.0.1:$o{port}\n";
$| = 1;

my $sel = IO::Select->new($listen);
my %conn;          # fileno => { sock, in, out }
my @held;          # [due, fileno, response, socket]
my $token_life = $o{'token-life'};   # POST /token-life/N
my $expires_in = '';   # POST /expires-in/VALUE: the token answer's expires_in, as JSON text
my $token_suffix = ''; # POST /token-suffix/TEXT: appended to the access tokens answered
my @held_tokens;   # --token-hold: [fileno, response, socket]

sub respond
{
	my ($status, $body, %h) = @_;
	my $reason = { 200 => 'OK', 400 => 'Bad Request', 401 => 'Unauthorized',
		403 => 'Forbidden', 404 => 'Not Found', 410 => 'Gone', 429 => 'Too Many Requests' }->{$status}
	  // 'Status';
	my $head = "HTTP/1.1 $status $reason\r\nContent-Length: " . length($body) . "\r\n";
	$head .= "Content-Type: application/json\r\n" if length $body;
	$head .= "$_: $h{$_}\r\n" for sort keys %h;
	return "$head\r\n$body";
}

sub jwt_parts
{
	my ($jwt) = @_;
	my @p = split /\./, $jwt // '';
	return unless @p == 3;
	my ($h, $c) = eval { ($json->decode(decode_base64url($p[0])), $json->decode(decode_base64url($p[1]))) };
	return unless ref $h eq 'HASH' && ref $c eq 'HASH';
	return ($h, $c, decode_base64url($p[2]), "$p[0].$p[1]");
}

sub token_endpoint
{
	my ($body) = @_;
	$stat{token_requests}++;
	my %f = map { my ($k, $v) = split /=/, $_, 2; $v //= ''; $v =~ s/%([0-9A-Fa-f]{2})/chr(hex($1))/ge; ($k, $v) }
	  split /&/, $body;
	my $bad = sub { $stat{assertions_bad}++;
		respond(400, $json->encode({ error => 'invalid_grant', error_description => $_[0] })) };
	return $bad->('grant_type') unless ($f{grant_type} // '') eq 'urn:ietf:params:oauth:grant-type:jwt-bearer';
	my ($h, $c, $sig, $signed) = jwt_parts($f{assertion});
	return $bad->('not a JWT') unless $h;
	return $bad->('alg') unless ($h->{alg} // '') eq 'RS256';
	return $bad->('Invalid JWT Signature.')
	  unless $rsa && $rsa->verify_message($sig, $signed, 'SHA256', 'v1.5');
	my $now = time;
	return $bad->('iss') unless ($c->{iss} // '') eq $o{email};
	return $bad->('scope') unless ($c->{scope} // '') eq 'https://www.googleapis.com/auth/firebase.messaging';
	return $bad->('aud') unless $o{'token-uri'} eq '' || ($c->{aud} // '') eq $o{'token-uri'};
	return $bad->('iat') unless abs(($c->{iat} // 0) - $now) < 60;
	return $bad->('exp') unless ($c->{exp} // 0) > $c->{iat} && $c->{exp} - $c->{iat} <= 3600;
	my $token = 'ya29.' . encode_base64url(join '', map { chr(int(rand(256))) } 1 .. 24);
	$issued{$token} = $now + $token_life;
	$stat{tokens_issued}++;
	$stat{last_token_life} = $token_life;
	my $answered = JSON::PP->new->allow_nonref->encode($token . $token_suffix);
	return respond(200, qq({"access_token":$answered,"expires_in":$token_life,"token_type":"Bearer"}))
	  if $expires_in eq '';
	return respond(200, qq({"access_token":$answered,"expires_in":$expires_in,"token_type":"Bearer"}));
}

sub fcm_error
{
	my ($code, $status, $message, $error_code) = @_;
	my %e = (code => $code, message => $message, status => $status);
	$e{details} = [ { '@type' => 'type.googleapis.com/google.firebase.fcm.v1.FcmError',
		errorCode => $error_code } ] if $error_code;
	return respond($code, $json->encode({ error => \%e }));
}

sub fcm_endpoint
{
	my ($hdr, $body, $project) = @_;
	$stat{fcm_calls}++;
	my ($bearer) = ($hdr->{authorization} // '') =~ /^Bearer (\S+)$/;
	unless ($bearer && $issued{$bearer} && $issued{$bearer} > time)
	{
		$stat{fcm_unauthenticated}++;
		return fcm_error(401, 'UNAUTHENTICATED',
			'Request had invalid authentication credentials. Expected OAuth 2 access token.');
	}
	my $m = eval { $json->decode($body)->{message} };
	return fcm_error(400, 'INVALID_ARGUMENT', 'Invalid JSON payload received.') unless ref $m eq 'HASH';
	my $t = $m->{token} // '';
	ledger($t, 0);
	return fcm_error(404, 'NOT_FOUND', 'Requested entity was not found.', 'UNREGISTERED') if $t =~ /^dead/;
	return fcm_error(400, 'INVALID_ARGUMENT', 'The registration token is not a valid FCM registration token',
		'INVALID_ARGUMENT') if $t =~ /^bad/;
	return fcm_error(429, 'RESOURCE_EXHAUSTED', 'Quota exceeded for quota metric.', 'QUOTA_EXCEEDED')
	  if $t =~ /^quota/;
	return respond(400, '{"error":{"code":400,"status":"x' . ("\xc3\xa9" x 150) . '"}}') if $t =~ /^long/;
	$stat{fcm_accepted}++;
	ledger($t, 1);
	return respond(200, $json->encode({ name => "projects/$project/messages/" . ++$msg_id }));
}

sub apns_endpoint
{
	my ($hdr, $body, $device) = @_;
	$stat{apns_calls}++;
	my ($jwt) = ($hdr->{authorization} // '') =~ /^bearer (\S+)$/i;
	return respond(403, '{"reason":"MissingProviderToken"}') unless $jwt;
	my ($h, $c, $sig, $signed) = jwt_parts($jwt);
	unless (exists $jwt_seen{$jwt})
	{
		my $ok = $h && ($h->{alg} // '') eq 'ES256' && ($h->{kid} // '') eq $o{kid}
		  && ($c->{iss} // '') eq $o{team} && length($sig) == 64
		  && $ecc && $ecc->verify_message_rfc7518($sig, $signed, 'SHA256');
		$jwt_seen{$jwt} = $ok ? 1 : 0;
		$stat{ $ok ? 'apns_jwt_verified' : 'apns_jwt_bad' }++;
	}
	return respond(403, '{"reason":"InvalidProviderToken"}') unless $jwt_seen{$jwt};
	if (time - $c->{iat} > $o{'apns-max-age'})
	{
		$stat{apns_expired_answers}++;
		$stat{apns_expired_tokens}++ unless $expired_jwt{$jwt}++;
		return respond(403, '{"reason":"ExpiredProviderToken"}');
	}
	return respond(400, '{"reason":"MissingTopic"}') unless $hdr->{'apns-topic'};
	ledger($device, 0);
	return respond(400, '{"reason":"BadDeviceToken"}') if $device =~ /^bad0/;
	return respond(410, '{"reason":"Unregistered","timestamp":1e30}') if $device =~ /^deadbeef/;
	return respond(410, $json->encode({ reason => 'Unregistered', timestamp => 1700000000000 }))
	  if $device =~ /^dead/;
	return respond(502, "\xff\xfe<html>Bad Gateway, caf\xc3\xa9</html>") if $device =~ /^0bad/;
	return respond(400, '{"padding":"' . ('x' x (4 * 1024 * 1024)) . '","reason":"BadDeviceToken"}')
	  if $device =~ /^fa7/;
	return respond(429, '{"reason":"TooManyRequests"}', 'Retry-After' => $o{'retry-after'})
	  if $device =~ /^c0de/ && !$throttled{$device}++;
	return respond(400, '{"reason":"BadDeviceToken"}') unless $device =~ /^[0-9a-f]+$/;
	$stat{apns_accepted}++;
	ledger($device, 1);
	return respond(200, '', 'apns-id' => sprintf('00000000-0000-0000-0000-%012d', ++$msg_id));
}

# a call to TOKEN received (ACCEPTED 0), or accepted
sub ledger
{
	my ($token, $accepted) = @_;
	my $e = $ledger{$token} //= [ 0, 0, 0, 0 ];
	if (!$accepted) { $e->[0]++; return; }
	my $us = int(time * 1e6);
	$e->[1]++;
	$e->[2] ||= $us;
	$e->[3] = $us;
}

sub unescape { my ($v) = @_; $v =~ s/%([0-9A-Fa-f]{2})/chr(hex($1))/ge; return $v; }

# one request: (response, held?)
sub handle
{
	my ($method, $target, $hdr, $body) = @_;
	if ($method eq 'GET' && $target eq '/stats')
	{
		return (respond(200, join('', map { "$_ $stat{$_}\n" } sort keys %stat)), 0);
	}
	if ($method eq 'GET' && $target eq '/ledger')
	{
		return (respond(200, join('', map { "$_ @{$ledger{$_}}[0, 1] 1 @{$ledger{$_}}[2, 3]\n" } sort keys %ledger)), 0);
	}
	if ($method eq 'GET' && $target eq '/secrets')
	{
		return (respond(200, join('', map { "$_\n" } sort(keys %issued), sort(keys %jwt_seen))), 0);
	}
	if ($method eq 'GET' && $target eq '/health') { return (respond(200, 'ok'), 0); }
	if ($method eq 'POST' && $target eq '/revoke') { %issued = (); return (respond(200, ''), 0); }
	if ($method eq 'POST' && $target =~ m{^/expires-in/(.*)$}) { $expires_in = $1; return (respond(200, ''), 0); }
	if ($method eq 'POST' && $target =~ m{^/token-life/(\d*)$}) { $token_life = $1 eq '' ? $o{'token-life'} : $1; return (respond(200, ''), 0); }
	if ($method eq 'POST' && $target =~ m{^/token-suffix/(.*)$}) { $token_suffix = unescape($1); return (respond(200, ''), 0); }
	if ($method eq 'POST' && $target =~ m{^/retry-after/(.*)$}) { $o{'retry-after'} = unescape($1); return (respond(200, ''), 0); }
	if ($method eq 'POST' && $target =~ m{^/delay-ms/(\d+)$}) { $o{'delay-ms'} = $1; return (respond(200, ''), 0); }
	if ($method eq 'POST' && $target eq '/release-tokens')
	{
		for my $h (splice @held_tokens)
		{
			my ($fd, $resp, $sock) = @$h;
			$stat{inflight}--;
			next unless $conn{$fd} && $conn{$fd}{sock} == $sock;
			$stat{token_answers}++;
			$conn{$fd}{out} .= $resp;
			flush_out($fd);
		}
		return (respond(200, ''), 0);
	}

	$stat{requests}++;
	$stat{injected}++ if exists $hdr->{'x-injected'};
	$stat{ ($hdr->{via} // '') =~ /^2 / ? 'http2' : 'http1' }++;
	return (token_endpoint($body), 1) if $method eq 'POST' && $target eq '/token';
	return (fcm_endpoint($hdr, $body, $1), 1) if $method eq 'POST' && $target =~ m{^/v1/projects/([^/]+)/messages:send$};
	return (apns_endpoint($hdr, $body, $1), 1) if $method eq 'POST' && $target =~ m{^/3/device/([^/?]+)$};
	if ($method eq 'POST' && $target =~ m{^/hook/}) { $stat{hooks}++; return (respond(200, '{"ok":true}'), 1); }
	return (respond(404, '{"reason":"BadPath"}'), 0);
}

# parse as many complete requests as the buffer holds
sub process
{
	my ($fd) = @_;
	my $c = $conn{$fd};
	while (1)
	{
		my $end = index($c->{in}, "\r\n\r\n");
		return if $end < 0;
		my $head = substr($c->{in}, 0, $end);
		my ($line, @lines) = split /\r\n/, $head;
		my ($method, $target) = split / /, $line;
		my %hdr;
		for (@lines) { my ($k, $v) = split /:\s*/, $_, 2; $hdr{ lc $k } = $v; }
		my $body;
		my $rest = $end + 4;
		if (($hdr{'transfer-encoding'} // '') =~ /chunked/i)
		{
			my $pos = $rest;
			$body = '';
			while (1)
			{
				my $le = index($c->{in}, "\r\n", $pos);
				return if $le < 0;
				my $size = hex(substr($c->{in}, $pos, $le - $pos));
				return if length($c->{in}) < $le + 2 + $size + 2;
				$body .= substr($c->{in}, $le + 2, $size);
				$pos = $le + 2 + $size + 2;
				last if $size == 0;
			}
			$rest = $pos;
		}
		else
		{
			my $len = $hdr{'content-length'} // 0;
			return if length($c->{in}) < $rest + $len;
			$body = substr($c->{in}, $rest, $len);
			$rest += $len;
		}
		substr($c->{in}, 0, $rest) = '';
		my ($resp, $counted) = handle($method, $target, \%hdr, $body);
		if ($counted && $o{'token-hold'} && $target eq '/token')
		{
			$stat{inflight}++;
			push @held_tokens, [ $fd, $resp, $c->{sock} ];
		}
		elsif ($counted && $o{'delay-ms'} > 0)
		{
			$stat{inflight}++;
			$stat{max_inflight} = $stat{inflight} if $stat{inflight} > $stat{max_inflight};
			push @held, [ time + $o{'delay-ms'} / 1000, $fd, $resp, $c->{sock} ];
		}
		else
		{
			$c->{out} .= $resp;
		}
	}
}

sub flush_out
{
	my ($fd) = @_;
	my $c = $conn{$fd} or return;
	while (length $c->{out})
	{
		my $n = syswrite($c->{sock}, $c->{out});
		last unless defined $n && $n > 0;
		substr($c->{out}, 0, $n) = '';
	}
}

while (1)
{
	my $timeout = undef;
	if (@held)
	{
		$timeout = $held[0][0] - time;
		$timeout = 0 if $timeout < 0;
	}
	my @ready = $sel->can_read($timeout);
	for my $s (@ready)
	{
		if ($s == $listen)
		{
			while (my $n = $listen->accept)
			{
				$n->blocking(0);
				setsockopt($n, IPPROTO_TCP, TCP_NODELAY, 1);
				$sel->add($n);
				$conn{ fileno $n } = { sock => $n, in => '', out => '' };
			}
			next;
		}
		my $fd = fileno $s;
		my $n = sysread($s, my $buf, 65536);
		if (!$n)
		{
			next if !defined $n && $!{EAGAIN};
			$sel->remove($s);
			delete $conn{$fd};
			close $s;
			next;
		}
		$conn{$fd}{in} .= $buf;
		process($fd);
		flush_out($fd);
	}
	my $now = time;
	while (@held && $held[0][0] <= $now)
	{
		my ($due, $fd, $resp, $sock) = @{ shift @held };
		$stat{inflight}--;
		next unless $conn{$fd} && $conn{$fd}{sock} == $sock;
		$conn{$fd}{out} .= $resp;
		flush_out($fd);
	}
}
