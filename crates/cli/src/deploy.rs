//! `tessera deploy`: a deployment rendered from a system file (`tessera-deploy`).

use anyhow::{Context, Result};
use clap::Subcommand;
use std::io::Write as _;
use std::path::{Path, PathBuf};
use tessera_config::SystemConfig;
use tessera_deploy::{BuStorage, KubernetesOptions, SystemdOptions};
use tessera_runtime::link::LinkKey;

/// Where the BUs write their run directories under Kubernetes.
#[derive(Clone, Copy, clap::ValueEnum)]
pub enum BuStorageArg {
    /// A memory-backed volume of each BU's pod.
    Ramdisk,
    /// The run's shared output volume.
    Shared,
}

/// What to render.
#[derive(Subcommand)]
pub enum DeployAction {
    /// Kubernetes manifests of the system, as one YAML stream: the system file in a ConfigMap,
    /// the run's keys in a Secret, a Pod per unit on its host's node with host networking (a BU's
    /// RAM disk a memory-backed volume), the emulated front ends, the FUs of each BU as a
    /// Deployment reading through its broker, the mergers; apply with `kubectl apply -f`.
    Kubernetes {
        /// The system file.
        system: PathBuf,
        /// The namespace of every object.
        #[arg(long, default_value = "tessera")]
        namespace: String,
        /// The image of every container.
        #[arg(long, default_value = concat!("tessera:", env!("CARGO_PKG_VERSION")))]
        image: String,
        /// Ports the file leaves to the system (0) are given fixed ones from this one up.
        #[arg(long, default_value_t = 9100)]
        base_port: u16,
        /// The storage class of the run's shared output volume (ReadWriteMany); default: the
        /// cluster's.
        #[arg(long)]
        storage_class: Option<String>,
        /// The size of the run's shared output volume.
        #[arg(long, default_value = "100Gi")]
        output_size: String,
        /// Write the manifests here instead of standard output (mode 0600: they hold the keys).
        #[arg(long)]
        output: Option<PathBuf>,
        /// Where the BUs write: `ramdisk`, a memory-backed volume of each BU's pod (its FUs read
        /// it through its broker, and its own micro and mini mergers run in its pod), or
        /// `shared`, the run's shared output volume (which a site may back with memory), where
        /// one mergers' pod reads every BU.
        #[arg(long, value_enum, default_value_t = BuStorageArg::Ramdisk)]
        bu_storage: BuStorageArg,
        /// Print each object as one line of JSON instead of a YAML stream.
        #[arg(long)]
        json: bool,
        /// A pipestream file (checked first): a Job runs its scan once, its results on the run's
        /// shared output volume under `pipestream/`.
        #[arg(long, value_name = "PIPESTREAM.yaml")]
        pipestream: Option<PathBuf>,
    },
    /// systemd units of the system for each of its hosts, written under `DIR/<host>/` with the
    /// system file and the run's keys as each host installs them (`/etc/systemd/system/`,
    /// `/etc/tessera/`).
    Systemd {
        /// The system file.
        system: PathBuf,
        /// Where to write, one directory per host.
        #[arg(long)]
        output: PathBuf,
        /// The run's output directory on every host (under it, the BUs' RAM disks and the FUs'
        /// outputs, shared with the FU hosts); default: the file's `run.output`, else
        /// /srv/tessera.
        #[arg(long)]
        run_output: Option<String>,
        /// Ports the file leaves to the system (0) are given fixed ones from this one up.
        #[arg(long, default_value_t = 9100)]
        base_port: u16,
        /// Where the binary is installed on the hosts.
        #[arg(long, default_value = "/usr/local/bin/tessera")]
        binary: String,
    },
}

/// Runs `tessera deploy`.
pub fn deploy(action: DeployAction) -> Result<()> {
    let (link_key, token) = keys()?;
    match action {
        DeployAction::Kubernetes {
            system,
            namespace,
            image,
            base_port,
            storage_class,
            output_size,
            output,
            bu_storage,
            json,
            pipestream,
        } => {
            let pipestream = match pipestream {
                Some(path) => {
                    tessera_pipestream::config::PipestreamConfig::load(&path)?;
                    Some(std::fs::read_to_string(&path).with_context(|| format!("reading {}", path.display()))?)
                }
                None => None,
            };
            let cfg = SystemConfig::load(&system)?;
            let opts = KubernetesOptions {
                namespace,
                image,
                base_port,
                link_key_hex: link_key,
                control_token: token,
                storage_class,
                output_size,
                menu: menu_text(&cfg)?,
                bu_storage: match bu_storage {
                    BuStorageArg::Ramdisk => BuStorage::RamDisk,
                    BuStorageArg::Shared => BuStorage::Shared,
                },
                pipestream,
            };
            let docs = tessera_deploy::kubernetes(&cfg, &opts)
                .with_context(|| format!("{}: cannot be deployed", system.display()))?;
            let text = if json {
                docs.iter().map(|d| format!("{d}\n")).collect()
            } else {
                tessera_deploy::kubernetes::to_yaml(&docs)
            };
            match output {
                Some(path) => {
                    write_secret_file(&path, &text)?;
                    say_err!("wrote {} objects to {}", docs.len(), path.display());
                }
                None => std::io::stdout().write_all(text.as_bytes()).context("writing the manifests")?,
            }
        }
        DeployAction::Systemd { system, output, run_output, base_port, binary } => {
            let cfg = SystemConfig::load(&system)?;
            let run_output = run_output
                .or_else(|| cfg.run.output.as_ref().map(|p| p.display().to_string()))
                .unwrap_or_else(|| "/srv/tessera".into());
            let opts = SystemdOptions {
                base_port,
                output: run_output,
                link_key_hex: link_key,
                control_token: token,
                binary,
                menu: menu_text(&cfg)?,
            };
            let files = tessera_deploy::systemd(&cfg, &opts)
                .with_context(|| format!("{}: cannot be deployed", system.display()))?;
            for f in &files {
                let name = f.name.trim_start_matches('/');
                let path = output.join(&f.host).join(name);
                if let Some(parent) = path.parent() {
                    std::fs::create_dir_all(parent).with_context(|| format!("creating {}", parent.display()))?;
                }
                write_secret_file(&path, &f.text)?;
            }
            let hosts: std::collections::BTreeSet<&str> = files.iter().map(|f| f.host.as_str()).collect();
            say_err!("wrote {} files for {} hosts under {}", files.len(), hosts.len(), output.display());
        }
    }
    Ok(())
}

/// A fresh link key for the run and a control token, both as hex.
fn keys() -> Result<(String, String)> {
    let key = LinkKey::generate().context("a link key for the run")?;
    let token = LinkKey::generate().context("a control token")?;
    Ok((key.to_hex(), token.to_hex()))
}

/// The text of the menu file `cfg` names, if it names one.
fn menu_text(cfg: &SystemConfig) -> Result<Option<String>> {
    cfg.fu
        .menu
        .as_ref()
        .map(|p| std::fs::read_to_string(p).with_context(|| format!("reading the menu {}", p.display())))
        .transpose()
}

/// Writes `text` to `path`, readable by its owner alone: it holds the run's keys.
fn write_secret_file(path: &Path, text: &str) -> Result<()> {
    use std::os::unix::fs::OpenOptionsExt as _;
    let mut file = std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(0o600)
        .open(path)
        .with_context(|| format!("writing {}", path.display()))?;
    file.write_all(text.as_bytes()).with_context(|| format!("writing {}", path.display()))
}
