//! UCX's status codes and this crate's errors.

use crate::sys;
use std::ffi::CStr;
use std::fmt;
use std::time::Duration;

/// A UCX status code (`ucs_status_t`): 0 is success, negative values are errors. Displayed with
/// UCX's own words (`ucs_status_string`) and its number.
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub struct Status(sys::ucs_status_t);

impl Status {
    /// Success (`UCS_OK`).
    pub const OK: Status = Status(sys::UCS_OK);
    /// An invalid parameter (`UCS_ERR_INVALID_PARAM`).
    pub const INVALID_PARAM: Status = Status(sys::UCS_ERR_INVALID_PARAM);
    /// The destination is unreachable (`UCS_ERR_UNREACHABLE`).
    pub const UNREACHABLE: Status = Status(sys::UCS_ERR_UNREACHABLE);
    /// No such device (`UCS_ERR_NO_DEVICE`): no usable transport.
    pub const NO_DEVICE: Status = Status(sys::UCS_ERR_NO_DEVICE);
    /// Busy (`UCS_ERR_BUSY`).
    pub const BUSY: Status = Status(sys::UCS_ERR_BUSY);
    /// The operation was canceled (`UCS_ERR_CANCELED`), e.g. by a forced close.
    pub const CANCELED: Status = Status(sys::UCS_ERR_CANCELED);
    /// Timed out (`UCS_ERR_TIMED_OUT`).
    pub const TIMED_OUT: Status = Status(sys::UCS_ERR_TIMED_OUT);
    /// The connection was reset (`UCS_ERR_CONNECTION_RESET`).
    pub const CONNECTION_RESET: Status = Status(sys::UCS_ERR_CONNECTION_RESET);
    /// The endpoint timed out (`UCS_ERR_ENDPOINT_TIMEOUT`): UCX's word for a peer gone.
    pub const ENDPOINT_TIMEOUT: Status = Status(sys::UCS_ERR_ENDPOINT_TIMEOUT);

    /// The status UCX returned.
    pub(crate) fn from_code(code: sys::ucs_status_t) -> Status {
        Status(code)
    }

    /// Its numeric code (`ucs_status_t` is one signed byte in UCX's ABI).
    pub fn code(self) -> i32 {
        self.0.into()
    }

    /// Whether it is an error (a negative code).
    pub fn is_error(self) -> bool {
        self.0 < 0
    }

    /// UCX's text for it.
    pub fn text(self) -> String {
        // SAFETY: ucs_status_string takes any value and returns a pointer to a static,
        // NUL-terminated string (UCX's table, or a static buffer for unknown codes); it is never
        // NULL. It is read at once into an owned String.
        let text = unsafe { sys::ucs_status_string(self.0) };
        if text.is_null() {
            return format!("status {}", self.0);
        }
        // SAFETY: non-NULL and NUL-terminated, as above.
        unsafe { CStr::from_ptr(text) }.to_string_lossy().into_owned()
    }

    /// `Ok(())` for `UCS_OK`, else `Err` with the call's name.
    pub(crate) fn check(code: sys::ucs_status_t, call: &'static str) -> Result<(), Error> {
        if code == sys::UCS_OK { Ok(()) } else { Err(Error::Call { call, status: Status(code) }) }
    }
}

impl fmt::Display for Status {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} ({})", self.text(), self.0)
    }
}

impl fmt::Debug for Status {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Status({}: {})", self.0, self.text())
    }
}

/// How an endpoint learns that its peer is gone (`ucp_err_handling_mode_t`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ErrorHandling {
    /// `UCP_ERR_HANDLING_MODE_PEER`: UCX detects the peer's failure, fails the endpoint's
    /// operations and reports [`Event::EndpointFailed`](crate::Event::EndpointFailed). UCX
    /// selects only transports that can detect it; in UCX 1.13 the shared-memory transports
    /// (`self`, `sysv`, `posix`) cannot, so an endpoint over `sm,self` alone cannot be made in
    /// this mode ([`Error::Connect`]).
    Peer,
    /// `UCP_ERR_HANDLING_MODE_NONE`: no detection. Sends to a peer that is gone stay in flight
    /// (see the crate's documentation for what UCX 1.13 does over shared memory).
    None,
}

/// What went wrong.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// UCX could not start with the transports asked for (e.g. none of them exists here).
    #[error(
        "UCX {version} could not start with transports {asked:?} ({from}): {status}; the transports UCX \
         finds on this machine (transport/device): {}",
        if available.is_empty() { "none".to_owned() } else { available.join(", ") }
    )]
    Init {
        /// The transports asked for: the configuration's, else `UCX_TLS`'s, else `"all"`.
        asked: String,
        /// Where they come from: `"as configured"`, `"from UCX_TLS"` or UCX's own choice.
        from: &'static str,
        /// UCX's answer.
        status: Status,
        /// Every transport/device pair UCX finds on this machine with all its transports
        /// allowed, e.g. `tcp/lo`, `posix/memory`.
        available: Vec<String>,
        /// UCX's version string.
        version: String,
    },
    /// UCX refused a configuration setting.
    #[error("UCX refused the setting {name}={value:?}: {status}")]
    Config {
        /// The setting's name, without the `UCX_` prefix.
        name: String,
        /// Its value.
        value: String,
        /// UCX's answer.
        status: Status,
    },
    /// A UCX call failed.
    #[error("{call} failed: {status}")]
    Call {
        /// The UCX function.
        call: &'static str,
        /// What it returned.
        status: Status,
    },
    /// An endpoint could not be made.
    #[error("connecting to the worker address failed ({mode:?} error handling): {status}{}",
        if *mode == ErrorHandling::Peer && *status == Status::UNREACHABLE {
            "; no transport of this context reaches the peer and can detect its failure (in UCX 1.13 \
             the shared-memory transports self, sysv and posix cannot): connect with \
             ErrorHandling::None, or allow tcp"
        } else { "" })]
    Connect {
        /// The error handling asked for.
        mode: ErrorHandling,
        /// UCX's answer.
        status: Status,
    },
    /// A system call failed.
    #[error("{call} failed: {error}")]
    System {
        /// The call.
        call: &'static str,
        /// The system's error.
        error: String,
    },
    /// A bounded wait ran out.
    #[error("{what} did not finish within {after:?}")]
    TimedOut {
        /// What was waited for.
        what: &'static str,
        /// The bound.
        after: Duration,
    },
}
