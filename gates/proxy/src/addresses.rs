//! Where a request's host is: the proxy resolves it once, before the
//! decision, and the monitor is told the addresses and what kind each is
//! (`context.addresses`, `context.address_kinds`), so that a name pointing
//! at the machine itself, its network or a cloud's metadata service is
//! seen as such. The upstream connection goes to these addresses only
//! ([`crate::upstream`]). The kinds and the cache are pure; [`Resolver`]
//! asks the system resolver.

use std::collections::{BTreeSet, HashMap};
use std::fmt;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::sync::{Mutex, PoisonError};
use std::time::{Duration, Instant};

/// At most this many addresses of a name are decided on (and connected
/// to); a name with more is cut to its first ones.
pub const MAX_ADDRESSES: usize = 16;

/// What an address is, for policies that cannot do CIDR arithmetic.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Kind {
    /// Globally routable: the web.
    Public,
    /// The machine itself: 127.0.0.0/8, ::1.
    Loopback,
    /// A private network: 10/8, 172.16/12, 192.168/16, 100.64/10 (shared
    /// address space, also used by overlay networks), fec0::/10.
    Private,
    /// Link-local: 169.254/16, fe80::/10.
    LinkLocal,
    /// IPv6 unique-local: fc00::/7.
    UniqueLocal,
    /// A cloud's instance metadata service: 169.254.169.254,
    /// 169.254.170.2, fd00:ec2::254, 100.100.100.200, 192.0.0.192.
    Metadata,
    /// 0.0.0.0/8 and ::, which reach the machine itself.
    Unspecified,
    /// 224/4, ff00::/8.
    Multicast,
    /// Anything else that is not routable on the internet: documentation,
    /// benchmarking, 240/4, broadcast, IPv4-compatible IPv6, …
    Reserved,
}

impl Kind {
    /// The name policies read in `context.address_kinds`.
    pub fn name(self) -> &'static str {
        match self {
            Self::Public => "public",
            Self::Loopback => "loopback",
            Self::Private => "private",
            Self::LinkLocal => "link-local",
            Self::UniqueLocal => "unique-local",
            Self::Metadata => "metadata",
            Self::Unspecified => "unspecified",
            Self::Multicast => "multicast",
            Self::Reserved => "reserved",
        }
    }
}

impl fmt::Display for Kind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// Addresses of cloud metadata services (AWS, its ECS task endpoint, GCP
/// and Azure share 169.254.169.254; Alibaba's; Oracle's older one).
const METADATA_V4: [Ipv4Addr; 4] = [
    Ipv4Addr::new(169, 254, 169, 254),
    Ipv4Addr::new(169, 254, 170, 2),
    Ipv4Addr::new(100, 100, 100, 200),
    Ipv4Addr::new(192, 0, 0, 192),
];

/// AWS's IPv6 metadata service.
const METADATA_V6: Ipv6Addr = Ipv6Addr::new(0xfd00, 0x0ec2, 0, 0, 0, 0, 0, 0x0254);

/// What `address` is. An IPv4 address written as IPv6 (`::ffff:a.b.c.d`),
/// or behind the well-known NAT64 or 6to4 prefixes, is what its IPv4
/// address is.
pub fn kind(address: IpAddr) -> Kind {
    match address {
        IpAddr::V4(v4) => kind_v4(v4),
        IpAddr::V6(v6) => kind_v6(v6),
    }
}

fn kind_v4(ip: Ipv4Addr) -> Kind {
    let [a, b, c, _] = ip.octets();
    if METADATA_V4.contains(&ip) {
        Kind::Metadata
    } else if a == 0 {
        Kind::Unspecified
    } else if a == 127 {
        Kind::Loopback
    } else if a == 10
        || (a == 172 && (16..32).contains(&b))
        || (a == 192 && b == 168)
        || (a == 100 && (64..128).contains(&b))
    {
        Kind::Private
    } else if a == 169 && b == 254 {
        Kind::LinkLocal
    } else if (224..240).contains(&a) {
        Kind::Multicast
    } else if a >= 240
        || (a == 192 && b == 0 && (c == 0 || c == 2))
        || (a == 198 && (b == 18 || b == 19))
        || (a == 198 && b == 51 && c == 100)
        || (a == 203 && b == 0 && c == 113)
        || (a == 192 && b == 88 && c == 99)
    {
        Kind::Reserved
    } else {
        Kind::Public
    }
}

fn kind_v6(ip: Ipv6Addr) -> Kind {
    if let Some(v4) = ip.to_ipv4_mapped() {
        return kind_v4(v4);
    }
    let segments = ip.segments();
    let [s0, s1, s2, s3, s4, s5, s6, s7] = segments;
    let embedded = |high: u16, low: u16| Ipv4Addr::from((u32::from(high) << 16) | u32::from(low));
    if ip == METADATA_V6 {
        Kind::Metadata
    } else if ip.is_unspecified() {
        Kind::Unspecified
    } else if ip.is_loopback() {
        Kind::Loopback
    } else if s0 & 0xfe00 == 0xfc00 {
        Kind::UniqueLocal
    } else if s0 & 0xffc0 == 0xfe80 {
        Kind::LinkLocal
    } else if s0 & 0xffc0 == 0xfec0 {
        Kind::Private
    } else if s0 & 0xff00 == 0xff00 {
        Kind::Multicast
    } else if [s0, s1, s2, s3, s4, s5] == [0x64, 0xff9b, 0, 0, 0, 0] {
        // NAT64: the gateway connects to the IPv4 address inside.
        kind_v4(embedded(s6, s7))
    } else if s0 == 0x2002 {
        // 6to4: the IPv4 address of the other end.
        match kind_v4(embedded(s1, s2)) {
            Kind::Public => Kind::Public,
            _ => Kind::Reserved,
        }
    } else if s0 & 0xe000 != 0x2000 || (s0 == 0x2001 && s1 == 0x0db8) {
        // Outside global unicast (IPv4-compatible ::a.b.c.d, 100::/64 …),
        // or documentation.
        Kind::Reserved
    } else {
        Kind::Public
    }
}

/// The addresses a request's host stands for, and their kinds.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Resolved {
    /// Sorted (IPv4 first), each once, an IPv4 address written as IPv6
    /// given as IPv4, at most [`MAX_ADDRESSES`]: the order they are tried
    /// in. Sorted, so that the same addresses in another order (a DNS
    /// server's rotation) are the same request and reuse the same
    /// connections.
    pub addresses: Vec<IpAddr>,
}

impl Resolved {
    /// `addresses` as a sorted set, the first [`MAX_ADDRESSES`] of them as
    /// given.
    pub fn new(addresses: impl IntoIterator<Item = IpAddr>) -> Self {
        let mut out: Vec<IpAddr> = Vec::new();
        for address in addresses {
            let address = address.to_canonical();
            if !out.contains(&address) && out.len() < MAX_ADDRESSES {
                out.push(address);
            }
        }
        out.sort();
        Self { addresses: out }
    }

    /// The kinds of the addresses, each once.
    pub fn kinds(&self) -> BTreeSet<Kind> {
        self.addresses.iter().map(|a| kind(*a)).collect()
    }

    /// Whether every address is public.
    pub fn all_public(&self) -> bool {
        self.kinds().iter().all(|k| *k == Kind::Public)
    }

    /// The addresses as text, in their order.
    pub fn texts(&self) -> Vec<String> {
        self.addresses.iter().map(ToString::to_string).collect()
    }

    /// The kinds' names, sorted.
    pub fn kind_names(&self) -> Vec<&'static str> {
        self.kinds().into_iter().map(Kind::name).collect()
    }

    /// `127.0.0.1 (loopback), 10.0.0.1 (private)`, for messages.
    pub fn describe(&self) -> String {
        self.addresses.iter().map(|a| format!("{a} ({})", kind(*a))).collect::<Vec<_>>().join(", ")
    }
}

/// Why a host has no addresses.
#[derive(Debug, thiserror::Error)]
pub enum ResolveError {
    /// The resolver failed (no such name, no network).
    #[error("`{host}` does not resolve: {source}")]
    Failed {
        /// The name.
        host: String,
        /// The resolver's error.
        source: std::io::Error,
    },
    /// The resolver answered nothing.
    #[error("`{0}` resolves to no address")]
    Empty(String),
    /// The resolver took too long.
    #[error("`{0}` did not resolve within {1:?}")]
    Timeout(String, Duration),
}

/// How long a name's addresses are reused: a request decides on the
/// addresses it connects to, so a name re-pointed meanwhile is decided
/// afresh at the latest this long after.
pub const REUSE_FOR: Duration = Duration::from_secs(30);

/// Names whose addresses are kept at most.
pub const MAX_NAMES: usize = 1024;

/// The addresses of names resolved lately, pure: the clock is passed in.
#[derive(Debug, Default)]
pub struct Cache {
    names: HashMap<String, (Resolved, Instant)>,
}

impl Cache {
    /// `name`'s addresses if they were resolved less than [`REUSE_FOR`]
    /// before `now`.
    pub fn get(&self, name: &str, now: Instant) -> Option<Resolved> {
        let (resolved, at) = self.names.get(name)?;
        (now.saturating_duration_since(*at) < REUSE_FOR).then(|| resolved.clone())
    }

    /// Keeps `name`'s addresses, resolved at `now`; when [`MAX_NAMES`] are
    /// kept, the stale ones go, and if none are stale, all.
    pub fn put(&mut self, name: &str, resolved: Resolved, now: Instant) {
        if self.names.len() >= MAX_NAMES && !self.names.contains_key(name) {
            self.names.retain(|_, (_, at)| now.saturating_duration_since(*at) < REUSE_FOR);
            if self.names.len() >= MAX_NAMES {
                self.names.clear();
            }
        }
        self.names.insert(name.to_owned(), (resolved, now));
    }

    /// How many names are kept.
    pub fn len(&self) -> usize {
        self.names.len()
    }

    /// Whether none are.
    pub fn is_empty(&self) -> bool {
        self.names.is_empty()
    }
}

/// The system resolver, asked at most once per name every [`REUSE_FOR`].
#[derive(Debug)]
pub struct Resolver {
    timeout: Duration,
    cache: Mutex<Cache>,
}

impl Resolver {
    /// A lookup may take at most `timeout`.
    pub fn new(timeout: Duration) -> Self {
        Self { timeout, cache: Mutex::new(Cache::default()) }
    }

    fn cache(&self) -> std::sync::MutexGuard<'_, Cache> {
        // Nothing in here can be left half done: a poisoned lock is as good.
        self.cache.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// The addresses of `host` (a URL's host: a name, or an IP address,
    /// which is its own).
    pub async fn resolve(&self, host: &url::Host<&str>) -> Result<Resolved, ResolveError> {
        let name = match host {
            url::Host::Ipv4(ip) => return Ok(Resolved::new([IpAddr::V4(*ip)])),
            url::Host::Ipv6(ip) => return Ok(Resolved::new([IpAddr::V6(*ip)])),
            url::Host::Domain(name) => *name,
        };
        if let Some(resolved) = self.cache().get(name, Instant::now()) {
            return Ok(resolved);
        }
        let looked_up = tokio::time::timeout(self.timeout, tokio::net::lookup_host((name, 0)))
            .await
            .map_err(|_| ResolveError::Timeout(name.to_owned(), self.timeout))?
            .map_err(|source| ResolveError::Failed { host: name.to_owned(), source })?;
        let resolved = Resolved::new(looked_up.map(|socket| socket.ip()));
        if resolved.addresses.is_empty() {
            return Err(ResolveError::Empty(name.to_owned()));
        }
        self.cache().put(name, resolved.clone(), Instant::now());
        Ok(resolved)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn of(text: &str) -> Kind {
        kind(text.parse().unwrap())
    }

    #[test]
    fn each_address_has_its_kind() {
        for (address, expected) in [
            ("93.184.215.14", Kind::Public),
            ("8.8.8.8", Kind::Public),
            ("172.32.0.1", Kind::Public),
            ("100.128.0.1", Kind::Public),
            ("2606:4700::6810:84e5", Kind::Public),
            ("127.0.0.1", Kind::Loopback),
            ("127.255.1.2", Kind::Loopback),
            ("::1", Kind::Loopback),
            ("::ffff:127.0.0.1", Kind::Loopback),
            ("::ffff:7f00:2", Kind::Loopback),
            ("64:ff9b::7f00:1", Kind::Loopback),
            ("10.1.2.3", Kind::Private),
            ("172.16.0.1", Kind::Private),
            ("172.31.255.255", Kind::Private),
            ("192.168.1.1", Kind::Private),
            ("100.64.0.1", Kind::Private),
            ("::ffff:10.0.0.1", Kind::Private),
            ("fec0::1", Kind::Private),
            ("169.254.1.1", Kind::LinkLocal),
            ("fe80::1", Kind::LinkLocal),
            ("fd12:3456::1", Kind::UniqueLocal),
            ("fc00::1", Kind::UniqueLocal),
            ("169.254.169.254", Kind::Metadata),
            ("::ffff:169.254.169.254", Kind::Metadata),
            ("169.254.170.2", Kind::Metadata),
            ("fd00:ec2::254", Kind::Metadata),
            ("100.100.100.200", Kind::Metadata),
            ("0.0.0.0", Kind::Unspecified),
            ("0.1.2.3", Kind::Unspecified),
            ("::", Kind::Unspecified),
            ("224.0.0.1", Kind::Multicast),
            ("ff02::1", Kind::Multicast),
            ("255.255.255.255", Kind::Reserved),
            ("240.0.0.1", Kind::Reserved),
            ("192.0.2.1", Kind::Reserved),
            ("198.18.0.1", Kind::Reserved),
            ("2001:db8::1", Kind::Reserved),
            ("::7f00:1", Kind::Reserved),
            ("2002:7f00:1::1", Kind::Reserved),
            ("2002:5db8:d70e::1", Kind::Public),
        ] {
            assert_eq!(of(address), expected, "{address}");
        }
    }

    #[test]
    fn resolved_addresses_are_a_bounded_set_with_their_kinds() {
        let resolved =
            Resolved::new(["::ffff:127.0.0.1", "127.0.0.1", "10.0.0.1", "::1"].map(|a| a.parse::<IpAddr>().unwrap()));
        assert_eq!(resolved.texts(), ["10.0.0.1", "127.0.0.1", "::1"]);
        assert_eq!(resolved.kind_names(), ["loopback", "private"]);
        assert!(!resolved.all_public());
        assert_eq!(resolved.describe(), "10.0.0.1 (private), 127.0.0.1 (loopback), ::1 (loopback)");
        // The same addresses in another order are the same.
        let rotated = Resolved::new(["::1", "10.0.0.1", "127.0.0.1"].map(|a| a.parse::<IpAddr>().unwrap()));
        assert_eq!(rotated, resolved);
        let many = Resolved::new((1..=40u8).map(|n| IpAddr::V4(Ipv4Addr::new(93, 184, 0, n))));
        assert_eq!(many.addresses.len(), MAX_ADDRESSES);
        assert!(many.all_public());
        assert_eq!(many.kind_names(), ["public"]);
    }

    #[tokio::test]
    async fn a_name_is_resolved_and_an_address_is_its_own() {
        let resolver = Resolver::new(Duration::from_secs(10));
        let loopback = resolver.resolve(&url::Host::Domain("localhost")).await.unwrap();
        assert!(loopback.kinds().iter().all(|k| *k == Kind::Loopback), "{loopback:?}");
        let literal = resolver.resolve(&url::Host::Ipv4(Ipv4Addr::LOCALHOST)).await.unwrap();
        assert_eq!(literal.texts(), ["127.0.0.1"]);
        let mapped = resolver.resolve(&url::Host::Ipv6("::ffff:127.0.0.1".parse().unwrap())).await.unwrap();
        assert_eq!(mapped.texts(), ["127.0.0.1"], "an IPv4 address written as IPv6 is that IPv4 address");
        assert!(resolver.resolve(&url::Host::Domain("no-such-host.invalid")).await.is_err());
        assert_eq!(resolver.cache().len(), 1, "only the name that resolved is kept");
    }

    #[test]
    fn a_names_addresses_are_reused_for_a_while_and_bounded() {
        let start = Instant::now();
        let mut cache = Cache::default();
        let one = Resolved::new(["93.184.215.14".parse().unwrap()]);
        cache.put("example.com", one.clone(), start);
        assert_eq!(cache.get("example.com", start + REUSE_FOR / 2), Some(one.clone()));
        assert_eq!(cache.get("example.com", start + REUSE_FOR), None, "stale");
        assert_eq!(cache.get("other.example", start), None);
        for n in 0..MAX_NAMES {
            cache.put(&format!("n{n}.example"), one.clone(), start + REUSE_FOR);
        }
        assert_eq!(cache.len(), MAX_NAMES, "the stale name made room");
        cache.put("one-more.example", one.clone(), start + REUSE_FOR);
        assert_eq!(cache.len(), 1, "none stale: all went");
        assert_eq!(cache.get("one-more.example", start + REUSE_FOR), Some(one));
    }
}
