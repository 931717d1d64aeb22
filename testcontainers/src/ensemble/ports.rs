//! Picking free ports (below the kernel's ephemeral range) and loopback addresses.

use std::collections::HashSet;
use std::fs;
use std::hash::{BuildHasher, Hasher};
use std::io;
use std::net::{Ipv4Addr, TcpListener};
use std::sync::atomic::{AtomicU64, Ordering};

/// A pseudo-random number, different on every call and in every process.
fn random_u64() -> u64 {
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    let mut h = std::collections::hash_map::RandomState::new().build_hasher();
    h.write_u64(COUNTER.fetch_add(1, Ordering::Relaxed));
    h.write_u32(std::process::id());
    if let Ok(d) = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH) {
        h.write_u128(d.as_nanos());
    }
    h.finish()
}

/// A random address in `127.1.0.1 ..= 127.254.255.254`, away from `127.0.0.1`.
pub(super) fn random_loopback_ip() -> Ipv4Addr {
    let r = random_u64();
    Ipv4Addr::new(
        127,
        1 + (r % 254) as u8,
        ((r >> 8) & 0xff) as u8,
        1 + ((r >> 16) % 254) as u8,
    )
}

/// The range ports are picked from: below the kernel's ephemeral range, so that the local
/// ports of outgoing connections (clients, proxies) never take them.
fn port_range() -> Option<(u16, u16)> {
    let text = fs::read_to_string("/proc/sys/net/ipv4/ip_local_port_range").ok();
    let low = text
        .as_deref()
        .and_then(|t| t.split_whitespace().next())
        .and_then(|v| v.parse::<u16>().ok())
        .unwrap_or(32768);
    let (lo, hi) = (10_000u16, low.min(32768));
    (hi > lo + 2000).then_some((lo, hi))
}

/// Binds `count` distinct free ports on `ip` and keeps them bound (the listeners) until the
/// caller drops them.
pub(crate) fn reserve_ports(
    ip: Ipv4Addr,
    count: usize,
    taken: &mut HashSet<u16>,
) -> io::Result<Vec<(u16, TcpListener)>> {
    let mut out = Vec::with_capacity(count);
    let range = port_range();
    while out.len() < count {
        let listener = match range {
            Some((lo, hi)) => {
                let mut found = None;
                for _ in 0..1000 {
                    let p = lo + (random_u64() % u64::from(hi - lo)) as u16;
                    if taken.contains(&p) {
                        continue;
                    }
                    if let Ok(l) = TcpListener::bind((ip, p)) {
                        found = Some(l);
                        break;
                    }
                }
                match found {
                    Some(l) => l,
                    None => TcpListener::bind((ip, 0))?,
                }
            }
            None => TcpListener::bind((ip, 0))?,
        };
        let port = listener.local_addr()?.port();
        if taken.insert(port) {
            out.push((port, listener));
        }
    }
    Ok(out)
}

/// Binds the `count` ports from `base` on `ip` (`base`, `base + 1`, ...) and keeps them bound
/// until the caller drops them; fails, naming the port, if one is taken or out of range.
pub(crate) fn reserve_ports_from(
    ip: Ipv4Addr,
    base: u16,
    count: usize,
) -> io::Result<Vec<(u16, TcpListener)>> {
    (0..count)
        .map(|i| {
            let port = u16::try_from(usize::from(base) + i)
                .ok()
                .filter(|p| *p != 0)
                .ok_or_else(|| {
                    io::Error::new(
                        io::ErrorKind::InvalidInput,
                        format!("port {} is out of range", usize::from(base) + i),
                    )
                })?;
            let listener = TcpListener::bind((ip, port)).map_err(|e| {
                io::Error::new(e.kind(), format!("cannot use port {port} on {ip}: {e}"))
            })?;
            Ok((port, listener))
        })
        .collect()
}
