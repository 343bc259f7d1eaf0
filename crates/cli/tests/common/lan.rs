//! Hosts as network namespaces on a LAN of the test's own, for the tests that run units (or
//! agents) on several hosts: each host a namespace joined by a veth pair to a bridge in a
//! namespace of its own (the switch), so that a host's link can be cut. Needs root and `ip`
//! (iproute2): without them [`Lan::create`] fails under CI and elsewhere says that the test
//! skips ([`super::require`]).

use super::{Processes, require, spawn_logged, wait_for_line};
use std::path::Path;
use std::process::{Command, Stdio};

/// Runs `ip args`; whether it succeeded.
pub fn ip(args: &[&str]) -> bool {
    Command::new("ip").args(args).stdout(Stdio::null()).stderr(Stdio::null()).status().is_ok_and(|s| s.success())
}

/// Hosts on a switch. Every process left in their namespaces is killed and the namespaces
/// removed when dropped.
pub struct Lan {
    switch: String,
    /// The hosts' namespaces, in the order of their addresses.
    pub hosts: Vec<String>,
    /// The switch's end of each host's link.
    ports: Vec<String>,
}

impl Lan {
    /// Hosts with `addresses` (/24). Their namespaces and links are named after `prefix` (at
    /// most 3 characters: an interface's name has at most 15), this process and `tag`, so that
    /// tests running at once, in this process or another, do not meet (each test's namespaces
    /// are a network of their own). `None` when this machine cannot make them (a failure under
    /// CI).
    pub fn create(prefix: &str, tag: char, addresses: &[&str]) -> Option<Lan> {
        assert!(prefix.len() <= 3 && addresses.len() <= 10, "interface names have at most 15 characters");
        let id = std::process::id();
        let mut lan = Lan { switch: format!("{prefix}-sw-{id}{tag}"), hosts: Vec::new(), ports: Vec::new() };
        let run = |step: &[&str]| {
            let why =
                format!("`ip {}` failed: the test makes hosts of network namespaces (root, iproute2)", step.join(" "));
            require(&why, ip(step))
        };
        let sw = lan.switch.clone();
        for step in [
            &["netns", "add", &sw][..],
            &["-n", &sw, "link", "add", "br0", "type", "bridge"],
            &["-n", &sw, "link", "set", "br0", "up"],
        ] {
            if !run(step) {
                return None;
            }
        }
        for (k, address) in addresses.iter().enumerate() {
            let host = format!("{prefix}-h{k}-{id}{tag}");
            let (veth, port) = (format!("{prefix}v{id}{tag}{k}"), format!("{prefix}s{id}{tag}{k}"));
            let cidr = format!("{address}/24");
            lan.hosts.push(host.clone());
            lan.ports.push(port.clone());
            for step in [
                &["netns", "add", &host][..],
                &["link", "add", &veth, "type", "veth", "peer", "name", &port],
                &["link", "set", &veth, "netns", &host],
                &["link", "set", &port, "netns", &sw],
                &["-n", &sw, "link", "set", &port, "master", "br0"],
                &["-n", &sw, "link", "set", &port, "up"],
                &["-n", &host, "addr", "add", &cidr, "dev", &veth],
                &["-n", &host, "link", "set", &veth, "up"],
                &["-n", &host, "link", "set", "lo", "up"],
            ] {
                if !run(step) {
                    return None;
                }
            }
        }
        Some(lan)
    }

    /// This package's `tessera` with `args`, to run inside host `k`'s namespace.
    pub fn tessera(&self, k: usize, args: &[&str]) -> Command {
        let mut command = Command::new("ip");
        command.args(["netns", "exec", &self.hosts[k], env!("CARGO_BIN_EXE_tessera")]).args(args);
        command
    }

    /// Starts `tessera agent` on host `k`, serving on `listen` with `token`, its work directory
    /// `dir/<label>` and its log `dir/<label>.log`; returns once it serves.
    pub fn start_agent(&self, units: &mut Processes, dir: &Path, k: usize, label: &str, listen: &str, token: &str) {
        let work = dir.join(label);
        let command =
            self.tessera(k, &["agent", "--listen", listen, "--token", token, "--work-dir", work.to_str().unwrap()]);
        units.0.push((label.to_string(), spawn_logged(command, &dir.join(format!("{label}.log")))));
        wait_for_line(dir, &format!("{label}.log"), "agent: serving");
    }

    /// Bytes that host `k` sent into the switch and received from it so far, as the switch's
    /// end of its link counts them.
    pub fn link_bytes(&self, k: usize) -> (u64, u64) {
        let got =
            Command::new("ip").args(["-n", &self.switch, "-s", "-j", "link", "show", "dev", &self.ports[k]]).output();
        let text = got.map(|o| String::from_utf8_lossy(&o.stdout).into_owned()).unwrap_or_default();
        let links: serde_json::Value = serde_json::from_str(&text).unwrap_or_else(|e| panic!("{e}: {text}"));
        let count = |way: &str| links[0]["stats64"][way]["bytes"].as_u64().unwrap_or_else(|| panic!("{text}"));
        // The switch's end receives what the host sends.
        (count("rx"), count("tx"))
    }

    /// Cuts host `k`'s link: its packets go nowhere, and nothing tells its peers.
    pub fn cut(&self, k: usize) {
        assert!(ip(&["-n", &self.switch, "link", "set", &self.ports[k], "down"]), "cutting {}", self.hosts[k]);
    }
}

impl Drop for Lan {
    fn drop(&mut self) {
        for ns in self.hosts.iter().chain([&self.switch]) {
            // Processes left behind a cut link (the controller could not end them) go too.
            if let Ok(out) = Command::new("ip").args(["netns", "pids", ns]).output() {
                for pid in String::from_utf8_lossy(&out.stdout).split_whitespace() {
                    let _ = Command::new("kill").args(["-9", pid]).status();
                }
            }
            ip(&["netns", "del", ns]);
        }
    }
}
