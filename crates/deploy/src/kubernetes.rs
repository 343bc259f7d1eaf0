//! Kubernetes manifests of a system ([`kubernetes`]).
//!
//! - a ConfigMap with the system file as deployed (and its menu), mounted at `/etc/tessera`;
//! - a Secret with the run's link key and the control token, given to every process as
//!   `TESSERA_LINK_KEY` and `TESSERA_CONTROL_TOKEN`;
//! - a Pod per unit (the EVM with RU 0, each other RU, each BU), pinned to its host's node, on the
//!   host's network (the data path: FEROL streams and protocol links reach the node's address),
//!   with CPU and memory from the configuration, restarted in place when it fails (a BU then
//!   recovers its RAM disk, a memory-backed volume sized from the configuration). A unit belongs
//!   to its node and its run: a bare Pod (not a Job, which would move it elsewhere and which
//!   `podman kube play` does not run) says just that;
//! - a Pod per emulated RU's front ends (`tessera ferol`), on the RU's node;
//! - per BU, its FUs as a Deployment of `fu.processes_per_bu` replicas on the FU host, reading
//!   through the BU's file broker, writing to the run's shared output volume (a claim the site
//!   binds to a file system every FU host shares);
//! - the mergers as a Pod on the merger host, on the same volume; when each BU writes to a
//!   memory-backed volume of its own pod, its micro and mini mergers run beside it in that pod
//!   (copying its bookkeeping to the shared volume), and the mergers' Pod runs the macro merger
//!   and the check;
//! - readiness and liveness probes on every unit's `/api/v1/health`, Prometheus scrape
//!   annotations on its `/metrics`; an FU, which serves nothing, keeps a file of its own
//!   ([`FU_ALIVE_FILE`]) that `tessera fu-alive` checks as its probes (see [`FU_HLT_LIMIT_S`]).
//!
//! Least privilege: every container runs as user 10001, without privilege escalation, with a
//! read-only root file system and every capability dropped; a unit whose links travel on UCX
//! adds `IPC_LOCK` alone (RDMA pins the memory it moves). Host networking is the one privilege
//! the data path needs: an RU's front ends and its peers reach it at its node's address.

use crate::{DeployError, Deployment, FRONT_END_WAIT_S, MENU_PATH, Placement, Role, SYSTEM_PATH, mebibytes};
use serde_json::{Value, json};
use tessera_config::SystemConfig;

/// Where, on the run's shared volume, the mergers beside each BU on its own RAM disk copy its
/// bookkeeping (`BU/runRRRRRR/`), for the macro merger's check. Not `/data/BU`: there the RAM
/// disk is mounted in their container, on a directory the container runtime made for it.
pub const BOOKKEEPING_COPIES: &str = "/data/bookkeeping";

/// The binary in the image, as probes run it.
pub const TESSERA_BINARY: &str = "/usr/local/bin/tessera";

/// The file an FU keeps while it lives (`tessera fu --alive-file`), on a small memory-backed
/// volume of its pod's own, which its probes check (`tessera fu-alive`).
pub const FU_ALIVE_FILE: &str = "/run/tessera/fu-alive.json";

/// How long one HLT call of an FU may last before its liveness probe fails, in s, at least: an
/// external HLT has 60 s for a file and, failing on a record, is started again (30 s) up to twice
/// more, 270 s in all; the menu decides a batch of events in milliseconds. A system whose BUs'
/// brokers wait longer for a silent FU (`fu.claim_lease_s`, 300 s by default; an FU on an HLT
/// call asks its broker nothing) waits as long: until then the FU's files are still its own.
pub const FU_HLT_LIMIT_S: u64 = 300;

/// How long one HLT call of an FU may last while it is ready, in s: one attempt of an external
/// HLT (30 s to start, 60 s for a file). Longer, it is retrying, or hangs.
pub const FU_READY_HLT_S: u64 = 90;

/// How old an FU's alive file may be, in s: it is written every second by a thread of its own,
/// whatever the HLT does; 30 missed, the process is frozen.
pub const FU_ALIVE_STALE_S: u64 = 30;

/// User and group every container runs as.
pub const RUN_AS: u64 = 10001;
/// The label every object carries, with the run's number.
const PART_OF: &str = "tessera";

/// How to render.
#[derive(Debug, Clone)]
pub struct KubernetesOptions {
    /// The namespace of every object.
    pub namespace: String,
    /// The image every container runs (`tessera` at `/usr/local/bin/tessera`).
    pub image: String,
    /// The first port given to ports the file leaves to the system.
    pub base_port: u16,
    /// The run's link key, as hex (64 digits).
    pub link_key_hex: String,
    /// The control token of every unit's control server.
    pub control_token: String,
    /// The storage class of the run's shared output volume (ReadWriteMany); `None`: the
    /// cluster's default.
    pub storage_class: Option<String>,
    /// Size of the shared output volume, as a quantity (`100Gi`).
    pub output_size: String,
    /// The text of the menu file the system names, if it names one.
    pub menu: Option<String>,
    /// Where each BU writes its files: its own memory-backed volume, or the shared output
    /// volume, which the mergers read.
    pub bu_storage: BuStorage,
    /// The text of a pipestream file: a Job runs its scan, writing its results on the shared
    /// output volume.
    pub pipestream: Option<String>,
}

/// Where the BUs write their run directories.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum BuStorage {
    /// A memory-backed volume of the BU's own pod (`emptyDir`, `medium: Memory`): the FUs read
    /// it through the BU's broker, and the BU's micro and mini mergers run in its pod.
    #[default]
    RamDisk,
    /// The run's shared output volume (whose storage class a site may back with memory, as CMS
    /// exports its BUs' RAM disks): the mergers read the BUs' bookkeeping there.
    Shared,
}

/// The manifests of `cfg`, one document each, in the order they are applied.
pub fn kubernetes(cfg: &SystemConfig, opts: &KubernetesOptions) -> Result<Vec<Value>, DeployError> {
    let mut d = Deployment::plan(cfg, opts.base_port, "/data")?;
    // Under Kubernetes a BU's directory is its volume, mounted at `/data/<bu>` in every pod that
    // reads it: a host path in the file (a bare-metal RAM disk) means nothing in a pod.
    for bu in &mut d.system.bus {
        bu.directory = None;
    }
    let k = Render { d: &d, opts, run: cfg.run.number };
    let mut docs = vec![k.config_map(), k.secret(), k.output_claim()];
    for unit in &d.units {
        docs.push(k.unit_pod(unit));
    }
    for (i, ru) in d.system.rus.iter().enumerate() {
        if ru.emulated && !d.system.is_orbit_mode() {
            docs.push(k.front_end_pod(i));
        }
    }
    if d.system.fu.enabled {
        for i in 0..d.system.bus.len() {
            docs.push(k.fu_deployment(i));
        }
        docs.push(k.merger_pod());
    }
    if opts.pipestream.is_some() {
        docs.push(k.pipestream_job());
    }
    Ok(docs)
}

struct Render<'a> {
    d: &'a Deployment,
    opts: &'a KubernetesOptions,
    run: u32,
}

impl Render<'_> {
    fn name(&self, what: &str) -> String {
        format!("tessera-{}-{}", self.run, what.to_lowercase().replace('_', "-"))
    }

    fn metadata(&self, what: &str, component: &str) -> Value {
        json!({
            "name": self.name(what),
            "namespace": self.opts.namespace,
            "labels": self.labels(component),
        })
    }

    fn labels(&self, component: &str) -> Value {
        json!({
            "app.kubernetes.io/part-of": PART_OF,
            "app.kubernetes.io/instance": format!("run-{}", self.run),
            "app.kubernetes.io/component": component,
        })
    }

    fn config_map(&self) -> Value {
        let mut data = json!({ "system.yaml": self.d.system_yaml() });
        if let Some(menu) = &self.opts.menu {
            data["menu.yaml"] = json!(menu);
        }
        if let Some(pipestream) = &self.opts.pipestream {
            data["pipestream.yaml"] = json!(pipestream);
        }
        json!({
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "metadata": self.metadata("system", "configuration"),
            "data": data,
        })
    }

    fn secret(&self) -> Value {
        json!({
            "apiVersion": "v1",
            "kind": "Secret",
            "metadata": self.metadata("keys", "configuration"),
            "type": "Opaque",
            // `data` (base64) rather than `stringData`: podman's `kube play` reads only `data`.
            "data": {
                "link-key": base64(self.opts.link_key_hex.as_bytes()),
                "control-token": base64(self.opts.control_token.as_bytes()),
            },
        })
    }

    fn output_claim(&self) -> Value {
        let mut spec = json!({
            "accessModes": ["ReadWriteMany"],
            "resources": { "requests": { "storage": self.opts.output_size } },
        });
        if let Some(class) = &self.opts.storage_class {
            spec["storageClassName"] = json!(class);
        }
        json!({
            "apiVersion": "v1",
            "kind": "PersistentVolumeClaim",
            "metadata": self.metadata("output", "storage"),
            "spec": spec,
        })
    }

    /// Where a pod on `host` runs: that node, or with a laptop's loopback hosts, the node of the
    /// run's other pods (they talk over loopback, so they must share one).
    fn placement(&self, host: &str) -> (Option<Value>, Option<Value>) {
        if Deployment::is_loopback(host) {
            let affinity = json!({
                "podAffinity": {
                    "requiredDuringSchedulingIgnoredDuringExecution": [{
                        "labelSelector": { "matchLabels": { "app.kubernetes.io/instance": format!("run-{}", self.run) } },
                        "topologyKey": "kubernetes.io/hostname",
                    }],
                },
            });
            (None, Some(affinity))
        } else {
            (Some(json!({ "kubernetes.io/hostname": host })), None)
        }
    }

    fn env(&self) -> Value {
        let from = |key: &str| json!({ "secretKeyRef": { "name": self.name("keys"), "key": key } });
        json!([
            { "name": "TESSERA_LINK_KEY", "valueFrom": from("link-key") },
            { "name": "TESSERA_CONTROL_TOKEN", "valueFrom": from("control-token") },
        ])
    }

    fn container_security(&self, ucx: bool) -> Value {
        let add: Vec<&str> = if ucx { vec!["IPC_LOCK"] } else { vec![] };
        json!({
            "allowPrivilegeEscalation": false,
            "readOnlyRootFilesystem": true,
            "runAsNonRoot": true,
            "capabilities": { "drop": ["ALL"], "add": add },
        })
    }

    fn pod_security(&self) -> Value {
        json!({
            "runAsUser": RUN_AS,
            "runAsGroup": RUN_AS,
            "fsGroup": RUN_AS,
            "runAsNonRoot": true,
            "seccompProfile": { "type": "RuntimeDefault" },
        })
    }

    /// The system's configuration where every container reads it, read-only.
    fn config_mount(&self) -> Value {
        json!({ "name": "system", "mountPath": "/etc/tessera", "readOnly": true })
    }

    fn config_volume(&self) -> Value {
        json!({ "name": "system", "configMap": { "name": self.name("system") } })
    }

    fn output_volume(&self) -> Value {
        json!({ "name": "output", "persistentVolumeClaim": { "claimName": self.name("output") } })
    }

    fn pod_spec(&self, host: &str, containers: Value, volumes: Value, restart: &str) -> Value {
        let (node_selector, affinity) = self.placement(host);
        let mut spec = json!({
            "hostNetwork": true,
            "dnsPolicy": "ClusterFirstWithHostNet",
            "restartPolicy": restart,
            "securityContext": self.pod_security(),
            "automountServiceAccountToken": false,
            "terminationGracePeriodSeconds": self.d.system.controller.stop_timeout_s + 10,
            "containers": containers,
            "volumes": volumes,
        });
        if let Some(n) = node_selector {
            spec["nodeSelector"] = n;
        }
        if let Some(a) = affinity {
            spec["affinity"] = a;
        }
        spec
    }

    fn unit_pod(&self, unit: &Placement) -> Value {
        let s = &self.d.system;
        let ucx = match unit.role {
            Role::Bu { .. } => s.transport.ru_bu == tessera_config::Transport::Ucx,
            _ => s.transport.uses_ucx(),
        };
        let (component, volume_mounts, mut volumes) = match unit.role {
            Role::Bu { index } if self.opts.bu_storage == BuStorage::RamDisk => {
                let directory = s.bu_directory(index, std::path::Path::new("/data"));
                let ramdisk = self.ramdisk_volume(index);
                (
                    "bu",
                    json!([
                        self.config_mount(),
                        { "name": ramdisk, "mountPath": directory.display().to_string() },
                    ]),
                    json!([
                        self.config_volume(),
                        { "name": ramdisk, "emptyDir": { "medium": "Memory", "sizeLimit": mebibytes(self.d.ramdisk_bytes()) } },
                    ]),
                )
            }
            Role::Bu { .. } => (
                "bu",
                json!([
                    self.config_mount(),
                    { "name": "output", "mountPath": "/data" },
                ]),
                json!([self.config_volume(), self.output_volume()]),
            ),
            Role::Evm => ("evm", json!([self.config_mount()]), json!([self.config_volume()])),
            Role::Ru { .. } => ("ru", json!([self.config_mount()]), json!([self.config_volume()])),
        };
        let mut memory = self.d.memory_bytes(unit);
        if matches!(unit.role, Role::Bu { .. }) && self.opts.bu_storage == BuStorage::RamDisk {
            // A memory-backed volume's pages are the pod's memory.
            memory += self.d.ramdisk_bytes();
        }
        let cpu = self.d.cpus(unit).to_string();
        let probe = |delay: u32| {
            json!({
                "httpGet": { "path": "/api/v1/health", "port": unit.control_port },
                "initialDelaySeconds": delay,
                "periodSeconds": 5,
                "failureThreshold": 6,
            })
        };
        let container = json!({
            "name": component,
            "image": self.opts.image,
            "args": self.d.unit_args(unit),
            "env": self.env(),
            // Requests equal to limits: the data path gets whole cores and its memory, never less.
            "resources": {
                "requests": { "cpu": cpu, "memory": mebibytes(memory) },
                "limits": { "cpu": cpu, "memory": mebibytes(memory) },
            },
            "readinessProbe": probe(1),
            "livenessProbe": probe(10),
            "securityContext": self.container_security(ucx),
            "volumeMounts": volume_mounts,
        });
        let mut metadata = self.metadata(&unit.name, component);
        metadata["annotations"] = json!({
            "prometheus.io/scrape": "true",
            "prometheus.io/port": unit.control_port.to_string(),
            "prometheus.io/path": "/metrics",
        });
        let mut containers = vec![container];
        if let Role::Bu { index } = unit.role
            && self.bu_mergers_beside_bus()
        {
            containers.push(self.bu_merger_container(index));
            volumes.as_array_mut().expect("a list").push(self.output_volume());
        }
        json!({
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": metadata,
            "spec": self.pod_spec(&unit.host, json!(containers), volumes, "OnFailure"),
        })
    }

    /// The name of BU `index`'s RAM-disk volume: its pod's name and `ramdisk`. Unique, because
    /// podman's `kube play` makes an `emptyDir` a named volume of the volume's name, which pods
    /// naming theirs alike would share, and which outlives the pod.
    fn ramdisk_volume(&self, index: usize) -> String {
        format!("{}-ramdisk", self.name(&self.d.system.bus[index].name))
    }

    /// Whether each BU's micro and mini mergers run in its pod: its files are on a memory-backed
    /// volume that only its own pod sees.
    fn bu_mergers_beside_bus(&self) -> bool {
        self.d.system.fu.enabled && self.opts.bu_storage == BuStorage::RamDisk
    }

    /// The BU's own micro and mini mergers, beside it in its pod: the BU's volume at its
    /// directory, over the run's shared volume at `/data`, where they write, and where they copy
    /// the BU's bookkeeping for the macro merger's check ([`BOOKKEEPING_COPIES`]). They end once
    /// the BU's share of the run is in storage, and the pod with them.
    fn bu_merger_container(&self, index: usize) -> Value {
        let bu = &self.d.system.bus[index].name;
        let directory = self.d.system.bu_directory(index, std::path::Path::new("/data"));
        let args = json!([
            "merge",
            "--system",
            SYSTEM_PATH,
            "--output",
            "/data",
            "--bu",
            bu,
            "--bookkeeping-copy",
            format!("{BOOKKEEPING_COPIES}/{bu}"),
            "--log-format",
            "json"
        ]);
        let mut container = self.helper_container("merge", args, ("1", "1Gi", "1Gi"), true);
        container["volumeMounts"]
            .as_array_mut()
            .expect("a list")
            .push(json!({ "name": self.ramdisk_volume(index), "mountPath": directory.display().to_string() }));
        container
    }

    /// A container beside the units (front ends, FUs, mergers, a scan): `args`, `(cpus, memory
    /// requested, memory limit)`, the system's configuration, and with `output` the run's shared
    /// volume at `/data`.
    fn helper_container(
        &self,
        name: &str,
        args: Value,
        (cpus, request, limit): (&str, &str, &str),
        output: bool,
    ) -> Value {
        let mut mounts = vec![self.config_mount()];
        if output {
            mounts.push(json!({ "name": "output", "mountPath": "/data" }));
        }
        json!({
            "name": name,
            "image": self.opts.image,
            "args": args,
            "resources": {
                "requests": { "cpu": cpus, "memory": request },
                "limits": { "cpu": cpus, "memory": limit },
            },
            "securityContext": self.container_security(false),
            "volumeMounts": mounts,
        })
    }

    fn front_end_pod(&self, ru: usize) -> Value {
        let section = &self.d.system.rus[ru];
        let wait = FRONT_END_WAIT_S.to_string();
        let args = json!([
            "ferol",
            "--system",
            SYSTEM_PATH,
            "--ru",
            section.name,
            "--connect-wait-s",
            wait,
            "--log-format",
            "json"
        ]);
        let container = self.helper_container("ferol", args, ("1", "256Mi", "512Mi"), false);
        json!({
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": self.metadata(&format!("{}-front-ends", section.name), "front-end"),
            "spec": self.pod_spec(&section.host, json!([container]), json!([self.config_volume()]), "Never"),
        })
    }

    fn fu_deployment(&self, bu: usize) -> Value {
        let s = &self.d.system;
        let section = &s.bus[bu];
        let broker = format!("{}:{}", section.host, section.broker_port.expect("planned"));
        let output = format!("/data/fu/{}", section.name);
        let mut args = vec![
            json!("fu"),
            json!("--broker"),
            json!(broker),
            json!("--output"),
            json!(output),
            json!("--run"),
            json!(self.run.to_string()),
            json!("--log-format"),
            json!("json"),
            json!("--alive-file"),
            json!(FU_ALIVE_FILE),
        ];
        if self.d.menu.is_some() {
            args.extend([json!("--menu"), json!(MENU_PATH)]);
        }
        let component = format!("fu-{}", section.name);
        let mut labels = self.labels("fu");
        labels["tessera.io/bu"] = json!(section.name);
        let mut container = self.helper_container("fu", json!(args), ("1", "512Mi", "1Gi"), true);
        // The FU serves nothing over HTTP: its probes check the file it keeps, on a volume of its
        // pod's own. Named after the Deployment, as a BU's RAM disk is ([`Self::ramdisk_volume`]):
        // podman would give the FUs of two BUs on one host one volume, and one file.
        let alive_volume = format!("{}-alive", self.name(&component));
        let alive_dir = std::path::Path::new(FU_ALIVE_FILE).parent().expect("a directory").display().to_string();
        container["volumeMounts"]
            .as_array_mut()
            .expect("a list")
            .push(json!({ "name": alive_volume, "mountPath": alive_dir }));
        let probe = |ready: bool, max_hlt_s: u64, delay: u32, period: u32| {
            let mut command = vec![json!(TESSERA_BINARY), json!("fu-alive"), json!("--file"), json!(FU_ALIVE_FILE)];
            if ready {
                command.push(json!("--ready"));
            }
            command.extend([
                json!("--max-age-s"),
                json!(FU_ALIVE_STALE_S.to_string()),
                json!("--max-hlt-s"),
                json!(max_hlt_s.to_string()),
            ]);
            json!({
                "exec": { "command": command },
                "initialDelaySeconds": delay,
                "periodSeconds": period,
                "timeoutSeconds": 5,
                "failureThreshold": 3,
            })
        };
        container["readinessProbe"] = probe(true, FU_READY_HLT_S, 1, 5);
        container["livenessProbe"] = probe(false, FU_HLT_LIMIT_S.max(s.fu.claim_lease_s), 10, 10);
        json!({
            "apiVersion": "apps/v1",
            "kind": "Deployment",
            "metadata": self.metadata(&component, "fu"),
            "spec": {
                "replicas": s.fu.processes_per_bu,
                "selector": { "matchLabels": labels },
                "template": {
                    "metadata": { "labels": labels },
                    "spec": self.pod_spec(
                        section.fu_host(),
                        json!([container]),
                        json!([
                            self.config_volume(),
                            self.output_volume(),
                            { "name": alive_volume, "emptyDir": { "medium": "Memory", "sizeLimit": "1Mi" } },
                        ]),
                        "Always",
                    ),
                },
            },
        })
    }

    fn merger_pod(&self) -> Value {
        let s = &self.d.system;
        let host = s.controller.merger_host.clone().unwrap_or_else(|| s.bus[0].fu_host().to_owned());
        let mut args = json!(["merge", "--system", SYSTEM_PATH, "--output", "/data", "--log-format", "json"]);
        if self.bu_mergers_beside_bus() {
            args.as_array_mut().expect("a list").extend([
                json!("--macro-only"),
                json!("--bookkeeping"),
                json!(BOOKKEEPING_COPIES),
            ]);
        }
        let container = self.helper_container("merge", args, ("1", "512Mi", "1Gi"), true);
        json!({
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": self.metadata("mergers", "merger"),
            "spec": self.pod_spec(&host, json!([container]), json!([self.config_volume(), self.output_volume()]), "OnFailure"),
        })
    }
}

impl Render<'_> {
    /// A Job that runs a pipestream scan once: its driver on the host's network (its instances
    /// are local, or reached through the agents the file names, with the token the Secret may
    /// hold as `agent-token`), its results under `/data/pipestream`.
    fn pipestream_job(&self) -> Value {
        let mut env = self.env();
        env.as_array_mut().expect("a list").push(json!({
            "name": "TESSERA_AGENT_TOKEN",
            "valueFrom": { "secretKeyRef": { "name": self.name("keys"), "key": "agent-token", "optional": true } },
        }));
        let args = json!([
            "pipestream",
            "scan",
            "/etc/tessera/pipestream.yaml",
            "--output",
            "/data/pipestream",
            "--log-format",
            "json"
        ]);
        let mut container = self.helper_container("pipestream", args, ("2", "1Gi", "2Gi"), true);
        container["env"] = env;
        let mut spec = self.pod_spec(
            "pipestream",
            json!([container]),
            json!([self.config_volume(), self.output_volume()]),
            "Never",
        );
        // Wherever the scheduler puts it: the file's hosts are its instances'.
        if let Some(map) = spec.as_object_mut() {
            map.remove("nodeSelector");
        }
        json!({
            "apiVersion": "batch/v1",
            "kind": "Job",
            "metadata": self.metadata("pipestream-scan", "pipestream"),
            "spec": {
                "backoffLimit": 0,
                "template": {
                    "metadata": { "labels": self.labels("pipestream") },
                    "spec": spec,
                },
            },
        })
    }
}

/// `bytes` in standard base64, padded.
fn base64(bytes: &[u8]) -> String {
    const ALPHABET: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let mut out = String::with_capacity(bytes.len().div_ceil(3) * 4);
    for chunk in bytes.chunks(3) {
        let b = [chunk[0], *chunk.get(1).unwrap_or(&0), *chunk.get(2).unwrap_or(&0)];
        let n = u32::from(b[0]) << 16 | u32::from(b[1]) << 8 | u32::from(b[2]);
        for i in 0..4 {
            if i <= chunk.len() {
                out.push(ALPHABET[(n >> (18 - 6 * i) & 63) as usize] as char);
            } else {
                out.push('=');
            }
        }
    }
    out
}

/// The documents as one YAML stream, `---` between them.
pub fn to_yaml(docs: &[Value]) -> String {
    docs.iter()
        .map(|d| serde_saphyr::to_string(d).expect("JSON values always serialize"))
        .collect::<Vec<_>>()
        .join("---\n")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn options() -> KubernetesOptions {
        KubernetesOptions {
            namespace: "daq".into(),
            image: "tessera:test".into(),
            base_port: 9100,
            link_key_hex: "00".repeat(32),
            control_token: "token".into(),
            storage_class: None,
            output_size: "100Gi".into(),
            menu: None,
            bu_storage: BuStorage::RamDisk,
            pipestream: None,
        }
    }

    fn kind<'a>(docs: &'a [Value], kind: &str) -> Vec<&'a Value> {
        docs.iter().filter(|d| d["kind"] == kind).collect()
    }

    #[test]
    fn the_laptop_system_renders_a_pod_per_unit_fus_mergers_and_its_configuration() {
        let docs = kubernetes(&SystemConfig::default(), &options()).unwrap();
        let pods = kind(&docs, "Pod");
        let names: Vec<&str> = pods.iter().map(|j| j["metadata"]["name"].as_str().unwrap()).collect();
        assert_eq!(
            names,
            [
                "tessera-1-evm",
                "tessera-1-ru1",
                "tessera-1-bu0",
                "tessera-1-bu1",
                "tessera-1-ru0-front-ends",
                "tessera-1-ru1-front-ends",
                "tessera-1-mergers"
            ]
        );
        assert_eq!(kind(&docs, "Deployment").len(), 2, "the FUs of each BU");
        let config = kind(&docs, "ConfigMap")[0]["data"]["system.yaml"].as_str().unwrap();
        let deployed = SystemConfig::from_yaml(config, std::path::Path::new("system.yaml")).unwrap();
        assert!(deployed.bus.iter().all(|b| b.broker_port.is_some()), "FUs read through brokers");
        // Loopback hosts: every pod on one node.
        let evm = &pods[0]["spec"];
        assert_eq!(evm["hostNetwork"], true);
        assert!(evm["affinity"]["podAffinity"].is_object(), "{evm}");
        let container = &evm["containers"][0];
        assert_eq!(container["securityContext"]["capabilities"]["drop"][0], "ALL");
        assert_eq!(container["securityContext"]["capabilities"]["add"].as_array().unwrap().len(), 0);
        assert_eq!(container["resources"]["requests"], container["resources"]["limits"]);
        assert_eq!(container["readinessProbe"]["httpGet"]["path"], "/api/v1/health");
        let bu = &pods[2]["spec"];
        assert_eq!(bu["volumes"][1]["emptyDir"]["medium"], "Memory");
        assert_eq!(bu["volumes"][1]["name"], "tessera-1-bu0-ramdisk", "one of its own");
        assert_eq!(bu["containers"][0]["args"][3], "--restart");
        // A front end is never restarted (its streams would start again): it waits for its RU.
        let front_end = &pods[4]["spec"];
        assert_eq!(front_end["restartPolicy"], "Never");
        let args: Vec<&str> =
            front_end["containers"][0]["args"].as_array().unwrap().iter().map(|a| a.as_str().unwrap()).collect();
        let wait = args.iter().position(|&a| a == "--connect-wait-s").expect("a wait for its RU");
        assert_eq!(args[wait + 1], FRONT_END_WAIT_S.to_string());
    }

    #[test]
    fn an_fu_is_probed_through_the_file_it_keeps_so_that_a_hung_hlt_restarts_it() {
        let mut cfg = SystemConfig::default();
        let docs = kubernetes(&cfg, &options()).unwrap();
        let spec = &kind(&docs, "Deployment")[0]["spec"]["template"]["spec"];
        assert_eq!(spec["restartPolicy"], "Always", "a failed liveness probe restarts the container");
        let fu = &spec["containers"][0];
        let args = fu["args"].as_array().unwrap();
        assert!(args.windows(2).any(|w| w == [json!("--alive-file"), json!(FU_ALIVE_FILE)]), "{args:?}");
        // The file lives on a memory-backed volume of the pod's own (the root file system is
        // read-only, and the shared volume is every replica's), named for its BU's FUs (podman
        // would share volumes named alike).
        assert_eq!(FU_ALIVE_FILE, "/run/tessera/fu-alive.json");
        let mount = json!({ "name": "tessera-1-fu-bu0-alive", "mountPath": "/run/tessera" });
        assert!(fu["volumeMounts"].as_array().unwrap().contains(&mount), "{}", fu["volumeMounts"]);
        let volumes = spec["volumes"].as_array().unwrap();
        let alive = volumes.iter().find(|v| v["name"] == "tessera-1-fu-bu0-alive").expect("its volume");
        assert_eq!(alive["emptyDir"]["medium"], "Memory");
        let other = &kind(&docs, "Deployment")[1]["spec"]["template"]["spec"]["volumes"];
        assert!(other.as_array().unwrap().iter().any(|v| v["name"] == "tessera-1-fu-bu1-alive"), "{other}");
        let command = |probe: &Value| -> Vec<String> {
            assert!(probe["httpGet"].is_null(), "an FU serves nothing: {probe}");
            probe["exec"]["command"].as_array().unwrap().iter().map(|a| a.as_str().unwrap().to_owned()).collect()
        };
        let (ready, live) = (&fu["readinessProbe"], &fu["livenessProbe"]);
        let probe = "/usr/local/bin/tessera fu-alive --file /run/tessera/fu-alive.json";
        assert_eq!(command(ready).join(" "), format!("{probe} --ready --max-age-s 30 --max-hlt-s 90"));
        assert_eq!(command(live).join(" "), format!("{probe} --max-age-s 30 --max-hlt-s 300"));
        assert_eq!(
            [ready["initialDelaySeconds"].clone(), ready["periodSeconds"].clone(), ready["failureThreshold"].clone()],
            [json!(1), json!(5), json!(3)]
        );
        assert_eq!(
            [live["initialDelaySeconds"].clone(), live["periodSeconds"].clone(), live["failureThreshold"].clone()],
            [json!(10), json!(10), json!(3)]
        );
        assert_eq!((ready["timeoutSeconds"].as_u64(), live["timeoutSeconds"].as_u64()), (Some(5), Some(5)));
        // Never before the HLT's own recovery (270 s) has had its chance, nor before the broker
        // gives a silent FU's files to others.
        assert!(FU_HLT_LIMIT_S >= 3 * (30 + 60) && FU_HLT_LIMIT_S >= cfg.fu.claim_lease_s);
        cfg.fu.claim_lease_s = 900;
        let docs = kubernetes(&cfg, &options()).unwrap();
        let live = &kind(&docs, "Deployment")[1]["spec"]["template"]["spec"]["containers"][0]["livenessProbe"];
        assert_eq!(command(live).last().unwrap(), "900", "as long as the broker's lease");
        // The units keep their HTTP probes.
        let evm = &kind(&docs, "Pod")[0]["spec"]["containers"][0];
        assert_eq!(evm["livenessProbe"]["httpGet"]["path"], "/api/v1/health");
    }

    #[test]
    fn a_pipestream_file_adds_its_scan_as_a_job_with_the_file_beside_the_system() {
        let opts = KubernetesOptions { pipestream: Some("duration_s: 1\n".into()), ..options() };
        let docs = kubernetes(&SystemConfig::default(), &opts).unwrap();
        let job = kind(&docs, "Job")[0];
        assert_eq!(job["metadata"]["name"], "tessera-1-pipestream-scan");
        let args = &job["spec"]["template"]["spec"]["containers"][0]["args"];
        assert_eq!(args[0], "pipestream");
        assert_eq!(args[2], "/etc/tessera/pipestream.yaml");
        assert_eq!(kind(&docs, "ConfigMap")[0]["data"]["pipestream.yaml"], "duration_s: 1\n");
    }

    #[test]
    fn secrets_are_base64_as_the_api_has_them() {
        assert_eq!(base64(b""), "");
        assert_eq!(base64(b"f"), "Zg==");
        assert_eq!(base64(b"fo"), "Zm8=");
        assert_eq!(base64(b"foo"), "Zm9v");
        assert_eq!(base64(b"foobar"), "Zm9vYmFy");
    }

    #[test]
    fn units_on_named_hosts_are_pinned_to_their_nodes_and_ucx_adds_ipc_lock_alone() {
        let mut cfg = SystemConfig::default();
        for (i, ru) in cfg.rus.iter_mut().enumerate() {
            ru.host = format!("ru-node-{i}");
        }
        for (i, bu) in cfg.bus.iter_mut().enumerate() {
            bu.host = format!("bu-node-{i}");
        }
        cfg.transport.ru_bu = tessera_config::Transport::Ucx;
        let docs = kubernetes(&cfg, &options()).unwrap();
        let pods = kind(&docs, "Pod");
        assert_eq!(pods[2]["spec"]["nodeSelector"]["kubernetes.io/hostname"], "bu-node-0");
        let caps = &pods[2]["spec"]["containers"][0]["securityContext"]["capabilities"];
        assert_eq!(caps["add"], json!(["IPC_LOCK"]));
        let yaml = to_yaml(&docs);
        assert_eq!(yaml.matches("\n---\n").count() + 1, docs.len(), "one document each");
        // On the shared volume, a BU mounts the run's claim and no memory-backed volume.
        let shared = kubernetes(&cfg, &KubernetesOptions { bu_storage: BuStorage::Shared, ..options() }).unwrap();
        let bu = &kind(&shared, "Pod")[2]["spec"];
        assert_eq!(bu["volumes"][1]["persistentVolumeClaim"]["claimName"], "tessera-1-output");
    }

    #[test]
    fn a_bu_on_its_own_ram_disk_has_its_mergers_beside_it_and_the_mergers_pod_runs_the_macro_alone() {
        let mut cfg = SystemConfig::default();
        // A bare-metal RAM disk path means nothing in a pod: the BU's volume is at /data/bu0.
        cfg.bus[0].directory = Some("/dev/shm/tessera".into());
        let docs = kubernetes(&cfg, &options()).unwrap();
        let pods = kind(&docs, "Pod");
        let (bu, mergers) = (&pods[2]["spec"], &pods[6]["spec"]);
        let merge = &bu["containers"][1];
        assert_eq!(merge["name"], "merge");
        let args: Vec<&str> = merge["args"].as_array().unwrap().iter().map(|a| a.as_str().unwrap()).collect();
        assert!(args.windows(2).any(|w| w == ["--bu", "bu0"]), "{args:?}");
        assert!(args.windows(2).any(|w| w == ["--bookkeeping-copy", "/data/bookkeeping/bu0"]), "{args:?}");
        let mounts: Vec<(&str, &str)> = merge["volumeMounts"]
            .as_array()
            .unwrap()
            .iter()
            .map(|m| (m["name"].as_str().unwrap(), m["mountPath"].as_str().unwrap()))
            .collect();
        for mount in [("output", "/data"), ("tessera-1-bu0-ramdisk", "/data/bu0")] {
            assert!(mounts.contains(&mount), "{mount:?} in {mounts:?}");
        }
        assert_eq!(bu["containers"][0]["volumeMounts"][1]["mountPath"], "/data/bu0");
        assert_eq!(merge["resources"]["requests"], merge["resources"]["limits"], "the BU's pod stays Guaranteed");
        let args = mergers["containers"][0]["args"].as_array().unwrap();
        assert!(args.contains(&json!("--macro-only")), "{args:?}");
        assert!(args.windows(2).any(|w| w == [json!("--bookkeeping"), json!("/data/bookkeeping")]), "{args:?}");
        let config = kind(&docs, "ConfigMap")[0]["data"]["system.yaml"].as_str().unwrap();
        let deployed = SystemConfig::from_yaml(config, std::path::Path::new("system.yaml")).unwrap();
        assert!(deployed.bus.iter().all(|b| b.directory.is_none()), "{config}");
        // On the shared volume, one mergers' pod reads every BU.
        let shared = kubernetes(&cfg, &KubernetesOptions { bu_storage: BuStorage::Shared, ..options() }).unwrap();
        let pods = kind(&shared, "Pod");
        assert_eq!(pods[2]["spec"]["containers"].as_array().unwrap().len(), 1);
        assert!(!pods[6]["spec"]["containers"][0]["args"].as_array().unwrap().contains(&json!("--macro-only")));
    }
}
