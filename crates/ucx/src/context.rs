//! The UCP context: UCX started with a set of transports.

use crate::error::{Error, Status};
use crate::sys;
use std::ffi::{CStr, CString};
use std::ptr;
use std::rc::Rc;

/// UCX started (`ucp_init`) with the features this crate uses: active messages and wake-up
/// (an event file descriptor per worker).
///
/// Not `Send`: a context, its workers, endpoints and memory regions stay on the thread that made
/// them (each thread that talks UCX makes its own context). Cloning is cheap and shares the one
/// context; UCX is cleaned up (`ucp_cleanup`) when the last clone, worker and region are gone.
#[derive(Clone)]
pub struct Context {
    pub(crate) inner: Rc<ContextInner>,
}

pub(crate) struct ContextInner {
    pub(crate) handle: sys::ucp_context_h,
}

impl Drop for ContextInner {
    fn drop(&mut self) {
        // SAFETY: the handle came from a successful ucp_init_version and is cleaned up once, here,
        // after every worker and memory region made from it (they hold this Rc) is gone.
        unsafe { sys::ucp_cleanup(self.handle) };
    }
}

/// A `ucp_config_t` read from the environment (`UCX_*` variables), released when dropped.
struct Config(*mut sys::ucp_config_t);

impl Config {
    fn read() -> Result<Config, Error> {
        let mut config = ptr::null_mut();
        // SAFETY: NULL prefix and file name ask for the defaults and the UCX_ environment; the
        // out pointer is valid for the call.
        Status::check(unsafe { sys::ucp_config_read(ptr::null(), ptr::null(), &mut config) }, "ucp_config_read")?;
        Ok(Config(config))
    }

    fn set(&mut self, name: &str, value: &str) -> Result<(), Error> {
        let refused = |status| Error::Config { name: name.to_owned(), value: value.to_owned(), status };
        let c_name = CString::new(name).map_err(|_| refused(Status::INVALID_PARAM))?;
        let c_value = CString::new(value).map_err(|_| refused(Status::INVALID_PARAM))?;
        // SAFETY: the config is live (released only in Drop); both strings are NUL-terminated and
        // live for the call, which copies them.
        let status = unsafe { sys::ucp_config_modify(self.0, c_name.as_ptr(), c_value.as_ptr()) };
        if status == sys::UCS_OK { Ok(()) } else { Err(refused(Status::from_code(status))) }
    }

    /// `ucp_init` (the header's inline wrapper of `ucp_init_version`) with this configuration.
    fn init(&self) -> Result<sys::ucp_context_h, Status> {
        let params = sys::ucp_params_t {
            field_mask: sys::UCP_PARAM_FIELD_FEATURES,
            features: sys::UCP_FEATURE_AM | sys::UCP_FEATURE_WAKEUP,
            request_size: 0,
            request_init: None,
            request_cleanup: None,
            tag_sender_mask: 0,
            mt_workers_shared: 0,
            estimated_num_eps: 0,
            estimated_num_ppn: 0,
            name: ptr::null(),
        };
        let mut handle = ptr::null_mut();
        // SAFETY: params and config are valid for the call (only the fields in field_mask are
        // read); the out pointer is valid. The API version is the one these declarations are
        // written (and checked) against.
        let status =
            unsafe { sys::ucp_init_version(sys::UCP_API_MAJOR, sys::UCP_API_MINOR, &params, self.0, &mut handle) };
        if status == sys::UCS_OK { Ok(handle) } else { Err(Status::from_code(status)) }
    }
}

impl Drop for Config {
    fn drop(&mut self) {
        // SAFETY: read by ucp_config_read, released once; UCP does not keep it after ucp_init.
        unsafe { sys::ucp_config_release(self.0) };
    }
}

impl Context {
    /// Starts UCX with the transports `transports` (`UCX_TLS`'s syntax: `"tcp"`, `"sm,self"`,
    /// `"all"`...), or with UCX's own choice (the `UCX_TLS` environment variable, else every
    /// transport) when `None`. The rest of the configuration comes from the `UCX_*` environment.
    ///
    /// When UCX cannot start with them (none of them exists, e.g. `"nosuch"`), the error
    /// ([`Error::Init`]) names the transports UCX does find on this machine.
    pub fn new(transports: Option<&str>) -> Result<Context, Error> {
        Context::with_config(transports, &[])
    }

    /// As [`Context::new`], with further UCX settings (names without the `UCX_` prefix, e.g.
    /// `("RNDV_THRESH", "64k")` or `("KEEPALIVE_INTERVAL", "1s")`), which override the
    /// environment.
    pub fn with_config(transports: Option<&str>, settings: &[(&str, &str)]) -> Result<Context, Error> {
        let mut config = Config::read()?;
        if let Some(transports) = transports {
            config.set("TLS", transports)?;
        }
        for (name, value) in settings {
            config.set(name, value)?;
        }
        match config.init() {
            Ok(handle) => Ok(Context { inner: Rc::new(ContextInner { handle }) }),
            Err(status) => Err(Error::Init {
                asked: transports.map(str::to_owned).or_else(|| std::env::var("UCX_TLS").ok()).unwrap_or("all".into()),
                from: match (transports, std::env::var_os("UCX_TLS")) {
                    (Some(_), _) => "as configured",
                    (None, Some(_)) => "from UCX_TLS",
                    (None, None) => "UCX's own choice: UCX_TLS is not set",
                },
                status,
                available: Context::available_transports().unwrap_or_default(),
                version: Context::ucx_version(),
            }),
        }
    }

    /// Every transport/device pair (`tcp/lo`, `posix/memory`, ...) that UCX finds on this machine
    /// when allowed every transport (`UCX_TLS=all`; other `UCX_*` settings, such as
    /// `UCX_NET_DEVICES`, still apply): the resources a context started that way reports
    /// (`ucp_context_print_info`). UCX 1.13 has no call that lists them as data.
    pub fn available_transports() -> Result<Vec<String>, Error> {
        let mut config = Config::read()?;
        config.set("TLS", "all")?;
        let handle = config.init().map_err(|status| Error::Call { call: "ucp_init_version", status })?;
        let context = ContextInner { handle };
        let text = print_info(&context)?;
        drop(context);
        Ok(resources(&text))
    }

    /// UCX's version, as the library loaded says (`ucp_get_version_string`), e.g. `"1.13.1"`.
    pub fn ucx_version() -> String {
        // SAFETY: returns a pointer to a static NUL-terminated string.
        let version = unsafe { sys::ucp_get_version_string() };
        if version.is_null() {
            return "(unknown version)".to_owned();
        }
        // SAFETY: non-NULL, static and NUL-terminated.
        unsafe { CStr::from_ptr(version) }.to_string_lossy().into_owned()
    }
}

/// What `ucp_context_print_info` prints for the context, caught in memory.
fn print_info(context: &ContextInner) -> Result<String, Error> {
    let mut buffer: *mut libc::c_char = ptr::null_mut();
    let mut size: libc::size_t = 0;
    // SAFETY: open_memstream writes the buffer's address and size into the two out pointers,
    // which live until after fclose (which is when they are final).
    let stream = unsafe { libc::open_memstream(&mut buffer, &mut size) };
    if stream.is_null() {
        return Err(Error::System { call: "open_memstream", error: std::io::Error::last_os_error().to_string() });
    }
    // SAFETY: the context is live; the stream is open and is only written by this call.
    unsafe { sys::ucp_context_print_info(context.handle, stream) };
    // SAFETY: closes the stream opened above, once; afterwards buffer/size describe its bytes.
    unsafe { libc::fclose(stream) };
    if buffer.is_null() {
        return Ok(String::new());
    }
    // SAFETY: after fclose, `buffer` holds `size` bytes (plus a NUL) allocated with malloc and
    // owned by us; they are copied out, then freed once.
    let text = unsafe { std::slice::from_raw_parts(buffer.cast::<u8>(), size) };
    let text = String::from_utf8_lossy(text).into_owned();
    // SAFETY: as above: malloc'd by the stream, freed once.
    unsafe { libc::free(buffer.cast()) };
    Ok(text)
}

/// The `transport/device` names of the `resource` lines of `ucp_context_print_info`'s text, in
/// its order, e.g. `#      resource 1  :  md 1  dev 1  flags -- tcp/lo`.
fn resources(text: &str) -> Vec<String> {
    text.lines()
        .filter(|line| line.trim_start_matches(['#', ' ']).starts_with("resource"))
        .filter_map(|line| line.rsplit_once("--").map(|(_, name)| name.trim().to_owned()))
        .filter(|name| !name.is_empty())
        .collect()
}

#[cfg(test)]
mod tests {
    use super::resources;

    #[test]
    fn the_resource_lines_of_print_info_give_transport_and_device() {
        let text = "#\n# UCP context\n#\n#     component 0  :  self\n#            md 0  :  component 0  self \n\
                    #\n#      resource 0  :  md 0  dev 0  flags -- self/memory0\n\
                    #      resource 1  :  md 1  dev 1  flags -- tcp/lo\n\
                    #      resource 2  :  md 2  dev 3  flags -- posix/memory\n#\n";
        assert_eq!(resources(text), ["self/memory0", "tcp/lo", "posix/memory"]);
        assert!(resources("").is_empty());
    }
}
