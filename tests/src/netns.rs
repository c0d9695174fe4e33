//! Network namespaces for partition tests: each process runs in its own namespace, with a veth
//! into a bridge in a hub namespace; the test itself reaches every node through one more veth
//! from its own namespace into the bridge (198.18.N.254, RFC 2544's test range).
//!
//! Partitions are routing changes inside one node's namespace, iproute2 only (`ip rule`): the
//! traffic to cut is routed into a dead-end veth whose far end discards it, so packets vanish
//! silently (no RST, no ICMP), as on a real partition. TCP needs both directions, so cutting a
//! node's outgoing packets to a peer cuts every connection between them; the one-way cuts are
//! per connection direction:
//!
//! - [`Cut::BothWays`]: everything this node sends to any other node vanishes.
//! - [`Cut::OutgoingTo`]: connections this node opens to `port` (e.g. an executor's requests to
//!   the managers) vanish; connections others open to it still work (pushes arrive).
//! - [`Cut::Incoming`]: connections others open to this node's `port` (pushes to an executor)
//!   vanish; connections it opens still work (its renewals succeed).
//!
//! The test's own address is never cut, so it can watch a partitioned node.
//!
//! Everything needs root and `ip netns`; [`NetLab::unavailable`] says why not, and the tests
//! then skip. `tc netem` is used only when the kernel has it ([`NetLab::netem_supported`]).

use std::collections::BTreeMap;
use std::process::Command;
use std::sync::atomic::{AtomicU32, Ordering};

/// The routing table that leads into the dead end.
const VOID_TABLE: &str = "77";
/// Priority of the rule that keeps the test's own traffic reachable, and of the cut rules.
const KEEP_TEST_PRIORITY: &str = "90";
const CUT_PRIORITY: &str = "100";
/// The dead-end veth's addresses, and the fake next hop (a permanent neighbour entry, so
/// nothing waits on ARP).
const VOID_ADDRESS: &str = "169.254.77.1/30";
const VOID_NEXT_HOP: &str = "169.254.77.2";
const VOID_NEXT_HOP_MAC: &str = "02:00:00:00:00:77";

/// Host octet of the test's own address.
const TEST_HOST: u8 = 254;

static LAB_SEQUENCE: AtomicU32 = AtomicU32::new(0);

/// How to partition a node (see the module docs).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Cut {
    BothWays,
    OutgoingTo { port: u16 },
    Incoming { port: u16 },
}

/// One node: a namespace and its address on the lab's bridge.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NetNode {
    pub name: String,
    pub netns: String,
    pub ip: String,
}

/// A hub namespace with a bridge, the test's link into it, and the nodes; all removed on drop.
#[derive(Debug)]
pub struct NetLab {
    prefix: String,
    subnet: String,
    hub: String,
    test_link: String,
    nodes: BTreeMap<String, NetNode>,
}

/// Routes what `selector` matches in namespace `netns` into the dead end.
fn void_rule(netns: &str, selector: &[&str]) -> Result<(), String> {
    let mut args = vec!["-n", netns, "rule", "add", "priority", CUT_PRIORITY];
    args.extend_from_slice(selector);
    args.extend(["lookup", VOID_TABLE]);
    ip(&args)?;
    Ok(())
}

fn run(program: &str, args: &[&str]) -> Result<String, String> {
    let output = Command::new(program)
        .args(args)
        .output()
        .map_err(|e| format!("{program} {}: {e}", args.join(" ")))?;
    if output.status.success() {
        Ok(String::from_utf8_lossy(&output.stdout).into_owned())
    } else {
        Err(format!(
            "{program} {}: {}",
            args.join(" "),
            String::from_utf8_lossy(&output.stderr).trim()
        ))
    }
}

fn ip(args: &[&str]) -> Result<String, String> {
    run("ip", args)
}

impl NetLab {
    /// Why partition tests cannot run here, if they cannot: not root, or no `ip netns`.
    pub fn unavailable() -> Option<String> {
        if !nix::unistd::geteuid().is_root() {
            return Some("not running as root (network namespaces need it)".into());
        }
        let probe = format!("lhprobe{}", std::process::id());
        match ip(&["netns", "add", &probe]) {
            Ok(_) => {
                let _ = ip(&["netns", "del", &probe]);
                None
            }
            Err(error) => Some(format!("`ip netns` does not work here: {error}")),
        }
    }

    /// Creates the hub, its bridge, and the test's link (198.18.N.254/24) into it, after removing
    /// what labs of test processes that no longer exist left behind (a killed test cannot clean
    /// up).
    pub fn new() -> Result<Self, String> {
        remove_abandoned_labs();
        let pid = std::process::id();
        let sequence = LAB_SEQUENCE.fetch_add(1, Ordering::Relaxed);
        let prefix = format!("lh{}x{}", pid % 1_000_000, sequence % 100);
        // A /24 no route here uses yet.
        let routes = ip(&["-4", "route", "show"])?;
        let third = (0..256u32)
            .map(|offset| (pid + sequence * 37 + offset) % 256)
            .find(|third| !routes.contains(&format!("198.18.{third}.")))
            .ok_or("no free 198.18.x.0/24 subnet")?;
        let mut lab = Self {
            subnet: format!("198.18.{third}"),
            hub: format!("{prefix}-hub"),
            test_link: format!("{prefix}t"),
            prefix,
            nodes: BTreeMap::new(),
        };
        lab.set_up_hub()?;
        Ok(lab)
    }

    fn set_up_hub(&mut self) -> Result<(), String> {
        let hub = self.hub.clone();
        ip(&["netns", "add", &hub])?;
        ip(&["-n", &hub, "link", "add", "name", "br0", "type", "bridge"])?;
        ip(&["-n", &hub, "link", "set", "dev", "br0", "up"])?;
        ip(&["-n", &hub, "link", "set", "dev", "lo", "up"])?;
        ip(&[
            "link",
            "add",
            "name",
            &self.test_link,
            "type",
            "veth",
            "peer",
            "name",
            "test",
            "netns",
            &hub,
        ])?;
        ip(&["-n", &hub, "link", "set", "dev", "test", "master", "br0"])?;
        ip(&["-n", &hub, "link", "set", "dev", "test", "up"])?;
        let address = format!("{}.{TEST_HOST}/24", self.subnet);
        ip(&["addr", "add", &address, "dev", &self.test_link])?;
        ip(&["link", "set", "dev", &self.test_link, "up"])?;
        Ok(())
    }

    /// The test's own address on the lab network.
    pub fn test_ip(&self) -> String {
        format!("{}.{TEST_HOST}", self.subnet)
    }

    /// Adds a node `name` with address 198.18.N.`host` in its own namespace, plus its dead-end
    /// veth and routing table for cuts.
    /// The address host `host` (1..127) gets from [`NetLab::add_node`], known before the node
    /// exists (e.g. for certificates).
    pub fn address_of(&self, host: u8) -> String {
        format!("{}.{host}", self.subnet)
    }

    pub fn add_node(&mut self, name: &str, host: u8) -> Result<NetNode, String> {
        assert!(host != TEST_HOST && host < 128, "hosts are 1..127");
        let netns = format!("{}-{name}", self.prefix);
        let node_ip = self.address_of(host);
        ip(&["netns", "add", &netns])?;
        ip(&["-n", &netns, "link", "set", "dev", "lo", "up"])?;
        ip(&[
            "-n", &self.hub, "link", "add", "name", name, "type", "veth", "peer", "name", "eth0",
            "netns", &netns,
        ])?;
        ip(&["-n", &self.hub, "link", "set", "dev", name, "master", "br0"])?;
        ip(&["-n", &self.hub, "link", "set", "dev", name, "up"])?;
        ip(&[
            "-n",
            &netns,
            "addr",
            "add",
            &format!("{node_ip}/24"),
            "dev",
            "eth0",
        ])?;
        ip(&["-n", &netns, "link", "set", "dev", "eth0", "up"])?;
        // The dead end: packets routed to void0 reach void1, addressed to a MAC nobody has.
        ip(&[
            "-n", &netns, "link", "add", "name", "void0", "type", "veth", "peer", "name", "void1",
        ])?;
        ip(&["-n", &netns, "link", "set", "dev", "void0", "up"])?;
        ip(&["-n", &netns, "link", "set", "dev", "void1", "up"])?;
        ip(&["-n", &netns, "addr", "add", VOID_ADDRESS, "dev", "void0"])?;
        ip(&[
            "-n",
            &netns,
            "neigh",
            "replace",
            VOID_NEXT_HOP,
            "lladdr",
            VOID_NEXT_HOP_MAC,
            "dev",
            "void0",
            "nud",
            "permanent",
        ])?;
        ip(&[
            "-n",
            &netns,
            "route",
            "add",
            "default",
            "via",
            VOID_NEXT_HOP,
            "dev",
            "void0",
            "table",
            VOID_TABLE,
        ])?;
        let node = NetNode {
            name: name.to_string(),
            netns,
            ip: node_ip,
        };
        self.nodes.insert(name.to_string(), node.clone());
        Ok(node)
    }

    fn node(&self, name: &str) -> &NetNode {
        self.nodes
            .get(name)
            .unwrap_or_else(|| panic!("no node {name} in the lab"))
    }

    /// Partitions `name` as `cut` says (replacing any earlier cut).
    pub fn cut(&self, name: &str, cut: Cut) -> Result<(), String> {
        self.heal(name)?;
        let netns = &self.node(name).netns;
        let test = format!("{}/32", self.test_ip());
        ip(&[
            "-n",
            netns,
            "rule",
            "add",
            "priority",
            KEEP_TEST_PRIORITY,
            "to",
            &test,
            "lookup",
            "main",
        ])?;
        let nodes = format!("{}.0/24", self.subnet);
        let port_text;
        let selector: Vec<&str> = match cut {
            Cut::BothWays => vec!["to", &nodes],
            Cut::OutgoingTo { port } => {
                port_text = port.to_string();
                vec!["to", &nodes, "ipproto", "tcp", "dport", &port_text]
            }
            Cut::Incoming { port } => {
                port_text = port.to_string();
                vec!["to", &nodes, "ipproto", "tcp", "sport", &port_text]
            }
        };
        void_rule(netns, &selector)
    }

    /// Removes any cut on `name`.
    /// Cuts node `name` off from the nodes `others` only, both ways (its packets to them
    /// vanish, so no connection between them completes), while every other node and the test
    /// still reach it: a leader cut off from its followers but not from its executors.
    pub fn cut_from_nodes(&self, name: &str, others: &[&str]) -> Result<(), String> {
        self.heal(name)?;
        let netns = &self.node(name).netns;
        for other in others {
            let host = format!("{}/32", self.node(other).ip);
            void_rule(netns, &["to", &host])?;
        }
        Ok(())
    }

    pub fn heal(&self, name: &str) -> Result<(), String> {
        let netns = &self.node(name).netns;
        for priority in [CUT_PRIORITY, KEEP_TEST_PRIORITY] {
            while ip(&["-n", netns, "rule", "del", "priority", priority]).is_ok() {}
        }
        Ok(())
    }

    /// Whether this kernel has `sch_netem` (many minimal VM kernels do not).
    pub fn netem_supported(&self) -> bool {
        let Some(node) = self.nodes.values().next() else {
            return false;
        };
        let supported = run(
            "tc",
            &[
                "-n",
                &node.netns,
                "qdisc",
                "add",
                "dev",
                "void1",
                "root",
                "netem",
                "delay",
                "1ms",
            ],
        )
        .is_ok();
        let _ = run(
            "tc",
            &["-n", &node.netns, "qdisc", "del", "dev", "void1", "root"],
        );
        supported
    }

    /// `tc qdisc replace … netem <args>` on both ends of `name`'s link: its outgoing packets and
    /// the packets sent to it (e.g. `["delay", "40ms", "20ms", "duplicate", "10%"]`).
    pub fn netem(&self, name: &str, args: &[&str]) -> Result<(), String> {
        let netns = &self.node(name).netns;
        for (namespace, device) in [(netns.as_str(), "eth0"), (self.hub.as_str(), name)] {
            let mut full = vec![
                "-n", namespace, "qdisc", "replace", "dev", device, "root", "netem",
            ];
            full.extend_from_slice(args);
            run("tc", &full)?;
        }
        Ok(())
    }

    /// Removes the netem qdiscs of `name`'s link.
    pub fn clear_netem(&self, name: &str) {
        let netns = &self.node(name).netns;
        let _ = run("tc", &["-n", netns, "qdisc", "del", "dev", "eth0", "root"]);
        let _ = run(
            "tc",
            &["-n", &self.hub, "qdisc", "del", "dev", name, "root"],
        );
    }
}

/// The pid a lab name (`lh<pid>x<n>...`) was made by.
fn lab_owner(name: &str) -> Option<u32> {
    let rest = name.strip_prefix("lh")?;
    let (pid, _) = rest.split_once('x')?;
    pid.parse().ok()
}

/// Deletes namespaces and test links of labs whose process is gone.
fn remove_abandoned_labs() {
    let abandoned = |name: &str| {
        lab_owner(name).is_some_and(|pid| !std::path::Path::new(&format!("/proc/{pid}")).exists())
    };
    if let Ok(namespaces) = ip(&["netns", "list"]) {
        for name in namespaces
            .lines()
            .filter_map(|line| line.split_whitespace().next())
        {
            if abandoned(name) {
                let _ = ip(&["netns", "del", name]);
            }
        }
    }
    if let Ok(links) = ip(&["-o", "link", "show"]) {
        for line in links.lines() {
            // "7: lh123x0t@if6: <...>"
            let Some(name) = line.split(": ").nth(1).and_then(|n| n.split('@').next()) else {
                continue;
            };
            if abandoned(name) {
                let _ = ip(&["link", "del", "dev", name]);
            }
        }
    }
}

impl Drop for NetLab {
    fn drop(&mut self) {
        // Deleting a namespace deletes its veth ends, and with them their peers.
        for node in self.nodes.values() {
            let _ = ip(&["netns", "del", &node.netns]);
        }
        let _ = ip(&["link", "del", "dev", &self.test_link]);
        let _ = ip(&["netns", "del", &self.hub]);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lab_names_carry_their_owner() {
        assert_eq!(lab_owner("lh4242x3-hub"), Some(4242));
        assert_eq!(lab_owner("lh4242x3t"), Some(4242));
        assert_eq!(lab_owner("lhprobe4242"), None);
        assert_eq!(lab_owner("eth0"), None);
    }
}
