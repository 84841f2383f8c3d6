//! Whom a request came from: the peer's address, unless the peer is a proxy this deployment
//! trusts (`--trusted-proxy`). Then its `X-Forwarded-For`, read right to left, names the client:
//! the first address that is not itself a trusted proxy. Anyone can write that header, so only
//! the hops that trusted proxies added are believed; without a trusted proxy it is ignored.

use std::net::{IpAddr, SocketAddr};

use axum::http::HeaderMap;

/// A network in CIDR notation (`10.0.0.0/8`, `2001:db8::/32`), or one address.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Network {
    base: IpAddr,
    prefix: u8,
}

impl std::str::FromStr for Network {
    type Err = String;

    fn from_str(text: &str) -> Result<Self, String> {
        let text = text.trim();
        let (address, prefix) = text.split_once('/').unwrap_or((text, ""));
        let base: IpAddr = address
            .parse()
            .map_err(|_| format!("`{text}` is not an address or a network like 10.0.0.0/8"))?;
        let width = if base.is_ipv4() { 32 } else { 128 };
        let prefix = if prefix.is_empty() && !text.contains('/') {
            width
        } else {
            prefix
                .parse::<u8>()
                .ok()
                .filter(|p| *p <= width)
                .ok_or_else(|| {
                    format!("`{text}`: the prefix after / is a number from 0 to {width}")
                })?
        };
        // A network of IPv4 addresses written as IPv6 (`::ffff:10.0.0.0/104`) is that IPv4
        // network: addresses are compared as IPv4 ones.
        match base {
            IpAddr::V6(v6) if prefix >= 96 && v6.to_ipv4_mapped().is_some() => Ok(Network {
                base: IpAddr::V4(v6.to_ipv4_mapped().expect("mapped")),
                prefix: prefix - 96,
            }),
            _ => Ok(Network { base, prefix }),
        }
    }
}

impl Network {
    /// Whether `address` is in this network (an IPv4 address written as IPv6, `::ffff:a.b.c.d`,
    /// counts as the IPv4 one).
    pub fn contains(&self, address: IpAddr) -> bool {
        let (base, address, width) = match (self.base, address.to_canonical()) {
            (IpAddr::V4(base), IpAddr::V4(address)) => (
                u128::from(u32::from(base)),
                u128::from(u32::from(address)),
                32,
            ),
            (IpAddr::V6(base), IpAddr::V6(address)) => (u128::from(base), u128::from(address), 128),
            _ => return false,
        };
        self.prefix == 0 || (base ^ address) >> (width - u32::from(self.prefix)) == 0
    }
}

/// The proxies whose `X-Forwarded-For` is believed; none by default.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct TrustedProxies(Vec<Network>);

impl TrustedProxies {
    /// Each entry a network or an address; blank entries are skipped.
    pub fn parse(entries: &[String]) -> Result<TrustedProxies, String> {
        entries
            .iter()
            .filter(|e| !e.trim().is_empty())
            .map(|e| e.parse())
            .collect::<Result<_, _>>()
            .map(TrustedProxies)
    }

    fn trusts(&self, address: IpAddr) -> bool {
        self.0.iter().any(|network| network.contains(address))
    }

    /// The client's address: `peer`, or behind trusted proxies the right-most forwarded
    /// address that is not one of them. An entry that is no address ends the walk at the
    /// proxy that wrote it; a chain of trusted proxies only gives the furthest of them.
    pub fn client(&self, peer: IpAddr, headers: &HeaderMap) -> IpAddr {
        let mut client = peer.to_canonical();
        if !self.trusts(client) {
            return client;
        }
        let forwarded: Vec<&str> = headers
            .get_all("x-forwarded-for")
            .iter()
            .filter_map(|v| v.to_str().ok())
            .flat_map(|v| v.split(','))
            .collect();
        for entry in forwarded.into_iter().rev() {
            let Some(hop) = hop_address(entry) else {
                break;
            };
            client = hop;
            if !self.trusts(hop) {
                break;
            }
        }
        client
    }
}

/// One `X-Forwarded-For` entry's address; some proxies add a port (`203.0.113.7:4711`,
/// `[2001:db8::7]:4711`).
fn hop_address(entry: &str) -> Option<IpAddr> {
    let entry = entry.trim();
    entry
        .parse::<IpAddr>()
        .or_else(|_| entry.parse::<SocketAddr>().map(|s| s.ip()))
        .or_else(|_| {
            entry
                .strip_prefix('[')
                .and_then(|e| e.strip_suffix(']'))
                .unwrap_or_default()
                .parse::<IpAddr>()
        })
        .ok()
        .map(|ip| ip.to_canonical())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn proxies(entries: &[&str]) -> TrustedProxies {
        let entries: Vec<String> = entries.iter().map(|e| (*e).to_owned()).collect();
        TrustedProxies::parse(&entries).unwrap()
    }

    fn forwarded(values: &[&str]) -> HeaderMap {
        let mut headers = HeaderMap::new();
        for value in values {
            headers.append("x-forwarded-for", value.parse().unwrap());
        }
        headers
    }

    fn ip(text: &str) -> IpAddr {
        text.parse().unwrap()
    }

    #[test]
    fn networks_are_cidrs_or_single_addresses() {
        let net: Network = "10.0.0.0/8".parse().unwrap();
        assert!(net.contains(ip("10.200.3.4")));
        assert!(!net.contains(ip("11.0.0.1")));
        assert!(net.contains(ip("::ffff:10.1.2.3")), "IPv4 written as IPv6");
        let one: Network = "192.0.2.7".parse().unwrap();
        assert!(one.contains(ip("192.0.2.7")));
        assert!(!one.contains(ip("192.0.2.8")));
        let v6: Network = "2001:db8::/32".parse().unwrap();
        assert!(v6.contains(ip("2001:db8:1::9")));
        assert!(!v6.contains(ip("2001:db9::1")));
        assert!(!v6.contains(ip("10.0.0.1")));
        let all: Network = "0.0.0.0/0".parse().unwrap();
        assert!(all.contains(ip("203.0.113.1")));
        assert!("::1/128".parse::<Network>().unwrap().contains(ip("::1")));
        // An IPv4 network written as IPv6 is that network.
        let mapped: Network = "::ffff:10.0.0.0/104".parse().unwrap();
        assert!(mapped.contains(ip("10.9.8.7")));
        assert!(mapped.contains(ip("::ffff:10.9.8.7")));
        assert!(!mapped.contains(ip("11.0.0.1")));
    }

    #[test]
    fn what_is_not_a_network_is_refused_with_the_entry_named() {
        for bad in [
            "10.0.0.0/33",
            "2001:db8::/129",
            "10.0.0.0/",
            "10.0.0.0/x",
            "10.0.0/8",
            "proxy.internal",
            "10.0.0.0/8/8",
        ] {
            let error = bad.parse::<Network>().unwrap_err();
            assert!(error.contains(bad), "{bad}: {error}");
        }
        let refused = TrustedProxies::parse(&["10.0.0.0/8".into(), "nope".into()]);
        assert!(refused.is_err());
        assert_eq!(
            TrustedProxies::parse(&[" ".into()]).unwrap(),
            TrustedProxies::default()
        );
    }

    #[test]
    fn the_client_is_the_right_most_address_not_a_trusted_proxy() {
        let trusted = proxies(&["10.0.0.0/8"]);
        let peer = ip("10.0.0.1");
        let client = |values: &[&str]| trusted.client(peer, &forwarded(values));
        assert_eq!(client(&["203.0.113.7"]), ip("203.0.113.7"));
        // What the client wrote itself, left of what the proxy added, is not believed.
        assert_eq!(client(&["198.51.100.1, 203.0.113.7"]), ip("203.0.113.7"));
        // Trusted hops are skipped, across header lines too.
        assert_eq!(client(&["203.0.113.7, 10.0.0.9"]), ip("203.0.113.7"));
        assert_eq!(client(&["203.0.113.7", "10.0.0.9"]), ip("203.0.113.7"));
        // Ports, brackets and IPv4 written as IPv6 are read as addresses.
        assert_eq!(client(&["203.0.113.7:4711"]), ip("203.0.113.7"));
        assert_eq!(client(&["[2001:db8::7]:4711"]), ip("2001:db8::7"));
        assert_eq!(client(&["[2001:db8::7]"]), ip("2001:db8::7"));
        assert_eq!(client(&["::ffff:203.0.113.7"]), ip("203.0.113.7"));
        // No header, garbage, or only proxies: the furthest trusted hop known.
        assert_eq!(client(&[]), peer);
        assert_eq!(client(&["unknown"]), peer);
        assert_eq!(client(&["203.0.113.7, nonsense, 10.0.0.9"]), ip("10.0.0.9"));
        assert_eq!(client(&["10.0.0.5, 10.0.0.9"]), ip("10.0.0.5"));
    }

    #[test]
    fn an_untrusted_peers_forwarded_for_is_ignored() {
        let headers = forwarded(&["203.0.113.7"]);
        assert_eq!(
            TrustedProxies::default().client(ip("10.0.0.1"), &headers),
            ip("10.0.0.1")
        );
        assert_eq!(
            proxies(&["10.0.0.0/8"]).client(ip("192.0.2.1"), &headers),
            ip("192.0.2.1")
        );
        assert_eq!(
            proxies(&["10.0.0.0/8"]).client(ip("::ffff:10.0.0.1"), &headers),
            ip("203.0.113.7"),
            "a dual-stack listener's view of an IPv4 proxy"
        );
    }
}
