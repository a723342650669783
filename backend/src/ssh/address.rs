//! Where each node is reached: what `ssh -G` makes of a host, the addresses a host
//! reports for itself, and the choice of one IPv4 address per host (resolved here, else
//! one only that host has, preferring one this machine can reach).

use super::wait::join_all;
use std::collections::BTreeMap;
use std::net::{IpAddr, Ipv4Addr};
use std::time::Duration;

/// For each host, the addresses it may be reached at: the one resolved here when there
/// is one, else those of the host's own addresses (`reported`) that no other host also
/// reports, in the host's order. Empty when neither gives one.
pub(super) fn address_candidates(
    resolved: &[Option<Ipv4Addr>],
    reported: &[Vec<Ipv4Addr>],
) -> Vec<Vec<Ipv4Addr>> {
    let mut counts: BTreeMap<Ipv4Addr, usize> = BTreeMap::new();
    for addresses in reported {
        let mut unique = addresses.clone();
        unique.sort();
        unique.dedup();
        for address in unique {
            *counts.entry(address).or_default() += 1;
        }
    }
    resolved
        .iter()
        .enumerate()
        .map(|(index, resolved)| match resolved {
            Some(address) => vec![*address],
            None => reported
                .get(index)
                .map(|addresses| {
                    addresses
                        .iter()
                        .copied()
                        .filter(|address| !address.is_loopback() && counts.get(address) == Some(&1))
                        .collect()
                })
                .unwrap_or_default(),
        })
        .collect()
}

/// The first candidate this machine can open a TCP connection to on port 22 (2 s each,
/// all at once), else the first candidate: a single vagrant machine's NAT address is its
/// alone too, but not reachable from here.
pub(super) async fn pick_address(candidates: &[Ipv4Addr]) -> Option<Ipv4Addr> {
    if candidates.len() <= 1 {
        return candidates.first().copied();
    }
    let probes = candidates.iter().map(|address| async move {
        let connect = tokio::net::TcpStream::connect((*address, 22));
        matches!(
            tokio::time::timeout(Duration::from_secs(2), connect).await,
            Ok(Ok(_))
        )
    });
    let reached = join_all(probes).await;
    candidates
        .iter()
        .zip(reached)
        .find(|(_, reached)| *reached)
        .map(|(address, _)| *address)
        .or_else(|| candidates.first().copied())
}

/// The IPv4 addresses in the output of `hostname -I` (every word) or of
/// `ip -4 -o addr show` (the word after each `inet`, not the `brd` one).
pub(super) fn parse_addresses(text: &str) -> Vec<Ipv4Addr> {
    let words: Vec<&str> = text.split_whitespace().collect();
    let candidates: Vec<&str> = if words.contains(&"inet") {
        words
            .windows(2)
            .filter(|pair| pair[0] == "inet")
            .map(|pair| pair[1])
            .collect()
    } else {
        words
    };
    candidates
        .into_iter()
        .filter_map(|word| word.split('/').next()?.parse::<Ipv4Addr>().ok())
        .filter(|address| !address.is_loopback() && !address.is_unspecified())
        .collect()
}

/// What `ssh -G` says ssh would use for a host.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(super) struct Effective {
    pub(super) hostname: Option<String>,
    pub(super) user: Option<String>,
    pub(super) port: Option<u16>,
}

/// Reads the `key value` lines of `ssh -G`.
pub(super) fn parse_ssh_g(text: &str) -> Effective {
    let mut effective = Effective::default();
    for line in text.lines() {
        let Some((key, value)) = line.split_once(' ') else {
            continue;
        };
        let value = value.trim();
        match key {
            "hostname" => effective.hostname = Some(value.to_string()),
            "user" => effective.user = Some(value.to_string()),
            "port" => effective.port = value.parse().ok(),
            _ => {}
        }
    }
    effective
}

/// The first non-loopback IPv4 address `hostname` resolves to here.
pub(super) async fn resolve_here(hostname: &str, port: u16) -> Option<Ipv4Addr> {
    let addresses = tokio::net::lookup_host((hostname, port)).await.ok()?;
    addresses
        .filter_map(|address| match address.ip() {
            IpAddr::V4(v4) if !v4.is_loopback() && !v4.is_unspecified() => Some(v4),
            _ => None,
        })
        .next()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn addresses_come_from_resolution_or_from_what_only_one_host_has() {
        let nat = Ipv4Addr::new(10, 0, 2, 15);
        let private = |i: u8| Ipv4Addr::new(192, 168, 56, i);
        let chosen = address_candidates(
            &[None, None, Some(Ipv4Addr::new(10, 1, 1, 1))],
            &[vec![nat, private(11)], vec![nat, private(12)], vec![]],
        );
        assert_eq!(
            chosen,
            vec![
                vec![private(11)],
                vec![private(12)],
                vec![Ipv4Addr::new(10, 1, 1, 1)]
            ]
        );
        assert_eq!(
            address_candidates(&[None, None], &[vec![nat], vec![nat]]),
            vec![Vec::<Ipv4Addr>::new(), Vec::new()]
        );
        // One machine alone: both of its addresses are its alone.
        assert_eq!(
            address_candidates(&[None], &[vec![nat, private(11)]]),
            vec![vec![nat, private(11)]]
        );
        assert_eq!(
            parse_addresses("10.0.2.15 192.168.56.11 fe80::1 \n"),
            vec![nat, private(11)]
        );
        assert_eq!(
            parse_addresses("2: eth0    inet 10.0.2.15/24 brd 10.0.2.255 scope global eth0\n"),
            vec![nat]
        );
        assert_eq!(
            parse_ssh_g(
                "user vagrant\nhostname 127.0.0.1\nport 2222\nidentityfile ~/.ssh/id_rsa\n"
            ),
            Effective {
                hostname: Some("127.0.0.1".into()),
                user: Some("vagrant".into()),
                port: Some(2222),
            }
        );
    }

    #[tokio::test]
    async fn an_address_no_one_answers_at_falls_back_to_the_first_candidate() {
        // Loopback addresses where nothing listens on port 22 refuse at once.
        let first = Ipv4Addr::new(127, 0, 0, 2);
        let second = Ipv4Addr::new(127, 0, 0, 3);
        assert_eq!(pick_address(&[first, second]).await, Some(first));
        assert_eq!(pick_address(&[second]).await, Some(second));
        assert_eq!(pick_address(&[]).await, None);
    }
}
