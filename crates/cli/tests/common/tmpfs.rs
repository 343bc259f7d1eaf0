//! A small RAM disk of the test's own: a tmpfs of a given size mounted on a new directory (which
//! needs root, as CI has), unmounted when dropped. Tests of other crates include this file by
//! its path, beside `require.rs`.

use std::path::{Path, PathBuf};
use std::process::Command;

/// A tmpfs mounted for one test.
pub struct Tmpfs {
    /// Holds the mount point; removed after the unmount.
    _dir: tempfile::TempDir,
    mounted: PathBuf,
}

impl Tmpfs {
    /// Mounts a tmpfs of `megabytes` MB on a new directory, or says why it cannot (not root, no
    /// `mount`).
    pub fn mount(megabytes: u64) -> Result<Tmpfs, String> {
        let dir = tempfile::tempdir().map_err(|e| format!("a directory to mount a tmpfs on: {e}"))?;
        let mounted = dir.path().join("ramdisk");
        std::fs::create_dir(&mounted).map_err(|e| format!("creating {}: {e}", mounted.display()))?;
        let out = Command::new("mount")
            .args(["-t", "tmpfs", "-o", &format!("size={megabytes}m"), "tessera-test"])
            .arg(&mounted)
            .output()
            .map_err(|e| format!("running mount: {e}"))?;
        if !out.status.success() {
            return Err(format!(
                "mounting a {megabytes} MB tmpfs needs root: mount says {}",
                String::from_utf8_lossy(&out.stderr).trim()
            ));
        }
        Ok(Tmpfs { _dir: dir, mounted })
    }

    /// Where it is mounted.
    pub fn path(&self) -> &Path {
        &self.mounted
    }
}

impl Drop for Tmpfs {
    fn drop(&mut self) {
        // Lazily: a file a unit still holds open must not keep the test's directory behind.
        let _ = Command::new("umount").arg("-l").arg(&self.mounted).status();
    }
}
