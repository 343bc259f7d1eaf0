//! `tessera config`: a system file, a selection menu or a pipestream file checked without
//! running anything, and the default system printed.

use std::path::Path;
use std::process::ExitCode;
use tessera_config::{SystemConfig, yaml};
use tessera_fu::menu::FileKind;
use tessera_pipestream::config::PipestreamConfig;
use tessera_pipestream::report::count;

/// `tessera config check`: `file` checked as a selection menu (`menu`), as a system file
/// (`system`), or as what its top-level keys say it is (a pipestream file when one is
/// pipestream's and none a system's); exit status 1 on any mistake.
pub fn check(file: &Path, menu: bool, system: bool) -> ExitCode {
    let kind = match (menu, system) {
        (true, _) => FileKind::Menu,
        (_, true) => FileKind::System,
        _ if is_pipestream(file) => return pipestream_check(file),
        _ => FileKind::of_file(file),
    };
    match kind {
        FileKind::System => system_check(file),
        FileKind::Menu => menu_check(file),
    }
}

/// Whether the file's top-level keys include one of a pipestream file's and none of a
/// system's (a misspelt key among them is then named as a pipestream file's mistake).
fn is_pipestream(file: &Path) -> bool {
    let Ok(text) = std::fs::read_to_string(file) else { return false };
    let top = yaml::top_level_keys(&text);
    let (pipestream, system) = (yaml::keys_of::<PipestreamConfig>(), yaml::keys_of::<SystemConfig>());
    top.iter().any(|k| pipestream.contains(&k.as_str())) && !top.iter().any(|k| system.contains(&k.as_str()))
}

/// `tessera config check` (and `tessera pipestream check`) of a pipestream file: read and
/// checked as a scan reads it.
pub fn pipestream_check(file: &Path) -> ExitCode {
    match PipestreamConfig::load(file) {
        Ok(cfg) => {
            let topologies: Vec<String> = cfg.scan_topologies().iter().map(|t| t.name()).collect();
            say!(
                "{}: OK: a pipestream file of {}: message sizes {:?} B, threads {:?}, topologies {}",
                file.display(),
                count((cfg.scan_message_bytes().len() * cfg.scan_threads().len() * topologies.len()) as u64, "point"),
                cfg.scan_message_bytes(),
                cfg.scan_threads(),
                topologies.join(", ")
            );
            ExitCode::SUCCESS
        }
        Err(errors) => {
            say_err!("{errors}");
            ExitCode::from(1)
        }
    }
}

/// `tessera config default`: the system `tessera run` runs without a file, as YAML.
pub fn print_default() -> ExitCode {
    say_part!("{}", tessera_config::SystemConfig::default().to_yaml());
    ExitCode::SUCCESS
}

/// `tessera config check`: the file read and checked as `tessera run` reads it, and the menu
/// file it names.
fn system_check(file: &Path) -> ExitCode {
    let cfg = match tessera_config::SystemConfig::load(file) {
        Ok(cfg) => cfg,
        Err(errors) => {
            say_err!("{errors}");
            return ExitCode::from(1);
        }
    };
    if cfg.fu.enabled
        && let Some(menu) = &cfg.fu.menu
        && let Err(errors) = tessera_fu::menu::Menu::load(menu)
    {
        // The menu's mistakes are the system file's, through its `fu.menu`.
        for line in errors.to_string().lines() {
            say_err!("{}: fu.menu: {line}", file.display());
        }
        return ExitCode::from(1);
    }
    let beyond = crate::run::beyond_this_machine(&cfg);
    if !beyond.is_empty() {
        for why in beyond {
            say_err!("{}: this machine cannot run it: {why}", file.display());
        }
        return ExitCode::from(1);
    }
    let farm = if cfg.fu.enabled {
        format!("filter farm of {} per BU", count(cfg.fu.processes_per_bu, "FU process"))
    } else {
        "no filter farm".to_owned()
    };
    let placement = match cfg.controller.agent_port {
        Some(port) => {
            let mut hosts: Vec<&str> = cfg.rus.iter().map(|r| r.host.as_str()).collect();
            hosts.extend(cfg.bus.iter().flat_map(|b| [b.host.as_str(), b.fu_host()]));
            hosts.sort_unstable();
            hosts.dedup();
            format!("; placed on {} hosts through agents on port {port}", hosts.len())
        }
        None => String::new(),
    };
    say!(
        "{}: OK: run {}, {} RUs, {} BUs, {} FEDs, {}{placement}",
        file.display(),
        cfg.run.number,
        cfg.rus.len(),
        cfg.bus.len(),
        cfg.all_feds().len(),
        farm
    );
    for advice in cfg.advice() {
        say!("{}: advice: {advice}", file.display());
    }
    ExitCode::SUCCESS
}

/// `tessera config check` of a selection menu: read and checked as an FU reads it.
fn menu_check(file: &Path) -> ExitCode {
    match tessera_fu::menu::Menu::load(file) {
        Ok(menu) => {
            say!(
                "{}: OK: a selection menu of {} streams ({}) and {} paths ({})",
                file.display(),
                menu.streams.len(),
                menu.streams.join(", "),
                menu.paths.len(),
                menu.paths.iter().map(|path| path.name.as_str()).collect::<Vec<_>>().join(", ")
            );
            ExitCode::SUCCESS
        }
        Err(errors) => {
            say_err!("{errors}");
            ExitCode::from(1)
        }
    }
}
