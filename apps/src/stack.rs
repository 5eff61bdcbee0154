//! The node on the network: the words of the cmdline that place it there (`ip=`, `peer=`,
//! `neigh=`).

use kernel::cmdline::{parse_mac, Cmdline, CmdlineError, Ipv4Identity};

/// Where the node stands on the network, from the cmdline.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct NetArgs {
    /// `ip=A.B.C.D/N`: the node's address and prefix (its RoCE v2 GID is the IPv4-mapped one).
    pub ip: Ipv4Identity,
    /// `peer=A.B.C.D`: the other side's address, to connect to when it is the server, and to
    /// resolve when its GID is not an IPv4-mapped one.
    pub peer: Option<[u8; 4]>,
    /// `neigh=A.B.C.D,aa:bb:cc:dd:ee:ff`: a static neighbour entry (none: ARP finds them all).
    pub neigh: Option<([u8; 4], [u8; 6])>,
}

/// A network word of the cmdline that is missing or wrong.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum NetArgsError<'a> {
    /// `ip=` is required.
    NoIp,
    /// A word whose value does not parse.
    Bad(CmdlineError<'a>),
}

impl core::fmt::Display for NetArgsError<'_> {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        match self {
            NetArgsError::NoIp => write!(f, "need ip=A.B.C.D/N"),
            NetArgsError::Bad(CmdlineError::BadValue { key, value }) => match *key {
                "neigh" => write!(f, "neigh={value}: not A.B.C.D,aa:bb:cc:dd:ee:ff"),
                k => write!(
                    f,
                    "{k}={value}: not A.B.C.D{}",
                    if k == "ip" { "/N" } else { "" }
                ),
            },
        }
    }
}

/// The network words of `cmdline`.
pub fn net_args(cmdline: &str) -> Result<NetArgs, NetArgsError<'_>> {
    let c = Cmdline(cmdline);
    let ip = c
        .ipv4()
        .map_err(NetArgsError::Bad)?
        .ok_or(NetArgsError::NoIp)?;
    let bad = |key, value| NetArgsError::Bad(CmdlineError::BadValue { key, value });
    let addr = |v: &str| v.parse::<core::net::Ipv4Addr>().ok().map(|a| a.octets());
    let peer = match c.get("peer") {
        Some(v) => Some(addr(v).ok_or(bad("peer", v))?),
        None => None,
    };
    let neigh = match c.get("neigh") {
        Some(v) => {
            let (a, m) = v.split_once(',').ok_or(bad("neigh", v))?;
            Some((
                addr(a).ok_or(bad("neigh", v))?,
                parse_mac(m).ok_or(bad("neigh", v))?,
            ))
        }
        None => None,
    };
    Ok(NetArgs { ip, peer, neigh })
}

/// The IPv4 address of an IPv4-mapped GID (`::ffff:A.B.C.D`, RFC 4291 2.5.5.2, the RoCE v2
/// GID of an IPv4 address), None for any other GID.
pub fn gid_ipv4(gid: &[u8; 16]) -> Option<[u8; 4]> {
    let (head, v4) = gid.split_at(12);
    (head == [0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff]).then(|| [v4[0], v4[1], v4[2], v4[3]])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_network_words_parse_and_bad_ones_are_named() {
        let a = net_args("pingpong -s 8 role=client ip=10.0.0.2/24 peer=10.0.0.1").unwrap();
        assert_eq!(a.ip.addr, [10, 0, 0, 2]);
        assert_eq!(a.ip.prefix_len, 24);
        assert_eq!(a.peer, Some([10, 0, 0, 1]));
        assert_eq!(a.neigh, None);
        let a = net_args("ip=10.0.0.2/24 neigh=10.0.0.1,02:00:00:00:00:01").unwrap();
        assert_eq!(a.neigh, Some(([10, 0, 0, 1], [2, 0, 0, 0, 0, 1])));
        assert_eq!(net_args("peer=10.0.0.1"), Err(NetArgsError::NoIp));
        for (line, key) in [
            ("ip=10.0.0.2/24 peer=10.0.0", "peer"),
            ("ip=10.0.0.2/24 neigh=10.0.0.1", "neigh"),
            ("ip=10.0.0.2/24 neigh=10.0.0.1,02:00:00:00:01", "neigh"),
            ("ip=10.0.0.2/40", "ip"),
        ] {
            match net_args(line) {
                Err(NetArgsError::Bad(CmdlineError::BadValue { key: k, .. })) => {
                    assert_eq!(k, key, "{line}")
                }
                r => panic!("{line}: {r:?}"),
            }
        }
        assert_eq!(
            alloc::format!("{}", net_args("ip=1.2.3.4 peer=x").unwrap_err()),
            "peer=x: not A.B.C.D"
        );
    }

    #[test]
    fn an_ipv4_mapped_gid_gives_its_address() {
        assert_eq!(
            gid_ipv4(&mlx5::hca::ipv4_mapped_gid([10, 0, 0, 1])),
            Some([10, 0, 0, 1])
        );
        let mut link_local = [0u8; 16];
        link_local[..2].copy_from_slice(&[0xfe, 0x80]);
        assert_eq!(gid_ipv4(&link_local), None);
    }
}
