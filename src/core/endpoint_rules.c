/*-------------------------------------------------------------------------
 *
 * core/endpoint_rules.c
 *      Which network addresses a call to a customer's endpoint
 *      (notif_endpoint) may connect to, and the settings of endpoints:
 *      notif_deliver.endpoint_allow_cidrs (the operator's allow-list) and
 *      notif_deliver.endpoint_disable_after.
 *
 * A customer registers the url, so it may name anything: the rules refuse
 * loopback, private, link-local (the cloud metadata 169.254.169.254
 * included), multicast, unspecified and the other special-purpose blocks of
 * the IANA registries, IPv4 and IPv6.  An IPv6 address that carries an IPv4
 * one (IPv4-mapped ::ffff:0:0/96, NAT64 64:ff9b::/96, 6to4 2002::/16) is
 * judged by the IPv4 address it carries.  An address of the allow-list is
 * allowed whatever the rules say.
 *
 * The transport applies them to the very address libcurl is about to
 * connect to, after DNS resolution (http/sockets.c), so that no second
 * lookup comes between the check and the connection.  Nothing here throws
 * when judging an address: it runs inside a libcurl callback.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include <arpa/inet.h>
#include <limits.h>
#include <netinet/in.h>
#include <sys/socket.h>

#include "fmgr.h"
#include "utils/builtins.h"
#include "utils/guc.h"
#include "utils/inet.h"

#include "core/endpoint_rules.h"

PG_FUNCTION_INFO_V1(notif_endpoint_refuses);

/* one entry of the allow-list */
typedef struct Cidr
{
	int			family;			/* AF_INET or AF_INET6 */
	unsigned char addr[16];
	int			bits;
} Cidr;

typedef struct AllowList
{
	int			n;
	Cidr		cidr[FLEXIBLE_ARRAY_MEMBER];
} AllowList;

/* one refused block */
typedef struct Rule
{
	unsigned char addr[16];
	int			bits;
	const char *name;
} Rule;

static char *allow_cidrs_setting = NULL;
static const AllowList *allow_list = NULL;	/* the setting, parsed */
int			notif_endpoint_disable_after_s = 5 * 24 * 3600;

static const Rule ipv4_rules[] = {
	{{0, 0, 0, 0}, 8, "unspecified (0.0.0.0/8)"},
	{{10, 0, 0, 0}, 8, "private (10.0.0.0/8)"},
	{{100, 64, 0, 0}, 10, "shared address space (100.64.0.0/10)"},
	{{127, 0, 0, 0}, 8, "loopback (127.0.0.0/8)"},
	{{169, 254, 0, 0}, 16, "link-local (169.254.0.0/16, cloud metadata included)"},
	{{172, 16, 0, 0}, 12, "private (172.16.0.0/12)"},
	{{192, 0, 0, 0}, 24, "IETF protocol assignments (192.0.0.0/24)"},
	{{192, 0, 2, 0}, 24, "documentation (192.0.2.0/24)"},
	{{192, 88, 99, 0}, 24, "6to4 relay anycast (192.88.99.0/24)"},
	{{192, 168, 0, 0}, 16, "private (192.168.0.0/16)"},
	{{198, 18, 0, 0}, 15, "benchmarking (198.18.0.0/15)"},
	{{198, 51, 100, 0}, 24, "documentation (198.51.100.0/24)"},
	{{203, 0, 113, 0}, 24, "documentation (203.0.113.0/24)"},
	{{224, 0, 0, 0}, 4, "multicast (224.0.0.0/4)"},
	{{240, 0, 0, 0}, 4, "reserved (240.0.0.0/4, broadcast included)"},
};

static const Rule ipv6_rules[] = {
	{{0}, 128, "unspecified (::)"},
	{{0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1}, 128, "loopback (::1)"},
	{{0}, 8, "reserved (::/8)"},
	{{0, 0x64, 0xff, 0x9b, 0, 1}, 48, "NAT64 local use (64:ff9b:1::/48)"},
	{{0x01, 0x00}, 64, "discard-only (100::/64)"},
	{{0x20, 0x01, 0x0d, 0xb8}, 32, "documentation (2001:db8::/32)"},
	{{0x20, 0x01}, 23, "IETF protocol assignments (2001::/23)"},
	{{0xfc}, 7, "unique local (fc00::/7)"},
	{{0xfe, 0x80}, 10, "link-local (fe80::/10)"},
	{{0xfe, 0xc0}, 10, "site-local (fec0::/10)"},
	{{0xff}, 8, "multicast (ff00::/8)"},
};

static bool
prefix_matches(const unsigned char *a, const unsigned char *b, int bits)
{
	int			full = bits / 8;
	int			rest = bits % 8;

	if (memcmp(a, b, full) != 0)
		return false;
	if (rest == 0)
		return true;
	return ((a[full] ^ b[full]) & (0xff << (8 - rest))) == 0;
}

static bool
allowed(int family, const unsigned char *addr)
{
	const AllowList *l = allow_list;
	int			i;

	if (l == NULL)
		return false;
	for (i = 0; i < l->n; i++)
		if (l->cidr[i].family == family && prefix_matches(addr, l->cidr[i].addr, l->cidr[i].bits))
			return true;
	return false;
}

/* the IPv4 address an IPv6 one carries, if it carries one */
static bool
embedded_ipv4(const unsigned char *a6, unsigned char *a4)
{
	static const unsigned char mapped[12] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff};
	static const unsigned char nat64[12] = {0, 0x64, 0xff, 0x9b, 0, 0, 0, 0, 0, 0, 0, 0};

	if (memcmp(a6, mapped, 12) == 0 || memcmp(a6, nat64, 12) == 0)
	{
		memcpy(a4, a6 + 12, 4);
		return true;
	}
	if (a6[0] == 0x20 && a6[1] == 0x02)
	{
		memcpy(a4, a6 + 2, 4);	/* 6to4 */
		return true;
	}
	return false;
}

static const char *
ipv4_refused(const unsigned char *a4)
{
	int			i;

	if (allowed(AF_INET, a4))
		return NULL;
	for (i = 0; i < (int) lengthof(ipv4_rules); i++)
		if (prefix_matches(a4, ipv4_rules[i].addr, ipv4_rules[i].bits))
			return ipv4_rules[i].name;
	return NULL;
}

/*
 * Why a call to a customer's endpoint may not connect to this address, or
 * NULL if it may.  Never throws.
 */
const char *
notif_endpoint_address_refused(const struct sockaddr *sa)
{
	if (sa->sa_family == AF_INET)
		return ipv4_refused((const unsigned char *) &((const struct sockaddr_in *) sa)->sin_addr);
	if (sa->sa_family == AF_INET6)
	{
		const unsigned char *a6 = (const unsigned char *) &((const struct sockaddr_in6 *) sa)->sin6_addr;
		unsigned char a4[4];
		int			i;

		if (allowed(AF_INET6, a6))
			return NULL;
		if (embedded_ipv4(a6, a4))
			return ipv4_refused(a4);	/* judged by the IPv4 address it carries */
		for (i = 0; i < (int) lengthof(ipv6_rules); i++)
			if (prefix_matches(a6, ipv6_rules[i].addr, ipv6_rules[i].bits))
				return ipv6_rules[i].name;
		return NULL;
	}
	return "not an IP address";
}

/*
 * notif_endpoint_refuses(inet): the rule that refuses an address to an
 * endpoint's call under this session's allow-list, or NULL (allowed).
 */
Datum
notif_endpoint_refuses(PG_FUNCTION_ARGS)
{
	inet	   *ip = PG_GETARG_INET_PP(0);
	struct sockaddr_storage ss = {0};
	const char *why;

	if (ip_family(ip) == PGSQL_AF_INET)
	{
		struct sockaddr_in *sin = (struct sockaddr_in *) &ss;

		sin->sin_family = AF_INET;
		memcpy(&sin->sin_addr, ip_addr(ip), 4);
	}
	else
	{
		struct sockaddr_in6 *sin6 = (struct sockaddr_in6 *) &ss;

		sin6->sin6_family = AF_INET6;
		memcpy(&sin6->sin6_addr, ip_addr(ip), 16);
	}
	why = notif_endpoint_address_refused((struct sockaddr *) &ss);
	if (why == NULL)
		PG_RETURN_NULL();
	PG_RETURN_TEXT_P(cstring_to_text(why));
}

/*
 * A GUC's extra is freed by PostgreSQL: with free() up to 15, with
 * guc_free() (its own memory context) from 16 on.
 */
#if PG_VERSION_NUM >= 160000
#define extra_alloc(size) guc_malloc(LOG, (size))
#define extra_free(p) guc_free(p)
#else
#define extra_alloc(size) malloc(size)
#define extra_free(p) free(p)
#endif

/* one "address[/bits]" of the setting, or false */
static bool
parse_cidr(char *item, Cidr *c)
{
	char	   *slash = strchr(item, '/');
	int			max;

	if (slash)
		*slash = '\0';
	memset(c, 0, sizeof(Cidr));
	if (inet_pton(AF_INET, item, c->addr) == 1)
	{
		c->family = AF_INET;
		max = 32;
	}
	else if (inet_pton(AF_INET6, item, c->addr) == 1)
	{
		c->family = AF_INET6;
		max = 128;
	}
	else
		return false;
	c->bits = max;
	if (slash)
	{
		char	   *end;
		long		bits = strtol(slash + 1, &end, 10);

		if (slash[1] == '\0' || *end != '\0' || bits < 0 || bits > max)
			return false;
		c->bits = (int) bits;
	}
	return true;
}

/* the setting: CIDRs separated by commas or spaces, parsed into *extra */
static bool
check_allow_cidrs(char **newval, void **extra, GucSource source)
{
	char	   *copy = pstrdup(*newval ? *newval : "");
	char	   *save = NULL;
	char	   *item;
	int			n = 0;
	AllowList  *l;

	for (item = strtok_r(copy, ", \t", &save); item; item = strtok_r(NULL, ", \t", &save))
		n++;
	l = extra_alloc(offsetof(AllowList, cidr) + sizeof(Cidr) * Max(n, 1));
	if (l == NULL)
	{
		GUC_check_errcode(ERRCODE_OUT_OF_MEMORY);
		return false;
	}
	l->n = 0;
	strcpy(copy, *newval ? *newval : "");
	for (item = strtok_r(copy, ", \t", &save); item; item = strtok_r(NULL, ", \t", &save))
	{
		char	   *shown = pstrdup(item);

		if (!parse_cidr(item, &l->cidr[l->n]))
		{
			GUC_check_errdetail("\"%s\" is not an IPv4 or IPv6 address with an optional /prefix length.",
								shown);
			extra_free(l);
			return false;
		}
		pfree(shown);
		l->n++;
	}
	pfree(copy);
	*extra = l;
	return true;
}

static void
assign_allow_cidrs(const char *newval, void *extra)
{
	allow_list = (const AllowList *) extra;
}

void
notif_define_endpoint_gucs(void)
{
	DefineCustomStringVariable("notif_deliver.endpoint_allow_cidrs",
							   "Addresses a call to a customer's endpoint may connect to although a rule refuses them.",
							   "CIDRs separated by commas, e.g. 127.0.0.1/32, 10.1.2.0/24; empty: the rules alone (no loopback, private, link-local, multicast ...).",
							   &allow_cidrs_setting,
							   "",
							   PGC_SIGHUP, GUC_LIST_INPUT,
							   check_allow_cidrs, assign_allow_cidrs, NULL);

	DefineCustomIntVariable("notif_deliver.endpoint_disable_after",
							"How long a customer's endpoint may keep failing before it is disabled.",
							"Its calls never reached it, timed out or got a 5xx, with no success in between, for this long; 0: never.",
							&notif_endpoint_disable_after_s,
							5 * 24 * 3600, 0, INT_MAX,
							PGC_SIGHUP, GUC_UNIT_S,
							NULL, NULL, NULL);
}
