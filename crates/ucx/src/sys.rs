//! Hand-written declarations of exactly the UCX 1.13 types, constants and functions this crate
//! calls (`<ucp/api/ucp.h>`, `<ucs/type/status.h>`). Every struct and field here, and every
//! constant, is checked against the C headers by the test in `sys/layout.rs`, which compiles a
//! small C program against them.
//!
//! The names are UCX's, so that a reader can find each in the headers.

#![allow(non_camel_case_types)]

use std::ffi::{c_char, c_int, c_uint, c_ulong, c_void};
use std::marker::{PhantomData, PhantomPinned};

#[cfg(test)]
mod layout;

/// `ucs_status_t`: a C enum declared `UCS_S_PACKED` (`__attribute__((packed))`), so of one
/// byte, signed (its values run from -100 to 1): not an `int`.
pub type ucs_status_t = i8;
/// `ucs_status_ptr_t`: NULL, an error status cast to a pointer, or a request.
pub type ucs_status_ptr_t = *mut c_void;
/// `ucp_datatype_t`.
pub type ucp_datatype_t = u64;
/// `ucs_thread_mode_t`, `ucp_err_handling_mode_t`, `ucs_memory_type_t`: C enums with no negative
/// value, of `unsigned int` size.
pub type c_enum = c_uint;

pub const UCS_OK: ucs_status_t = 0;
pub const UCS_INPROGRESS: ucs_status_t = 1;
pub const UCS_ERR_INVALID_PARAM: ucs_status_t = -5;
pub const UCS_ERR_UNREACHABLE: ucs_status_t = -6;
pub const UCS_ERR_NO_DEVICE: ucs_status_t = -14;
pub const UCS_ERR_BUSY: ucs_status_t = -15;
pub const UCS_ERR_CANCELED: ucs_status_t = -16;
pub const UCS_ERR_TIMED_OUT: ucs_status_t = -20;
pub const UCS_ERR_CONNECTION_RESET: ucs_status_t = -25;
pub const UCS_ERR_ENDPOINT_TIMEOUT: ucs_status_t = -80;
/// `UCS_ERR_LAST`: a `ucs_status_ptr_t` at or above `(uintptr_t)UCS_ERR_LAST` is an error.
pub const UCS_ERR_LAST: ucs_status_t = -100;

/// An opaque UCX object, only ever behind a pointer.
macro_rules! opaque {
    ($($name:ident),*) => {$(
        #[repr(C)]
        pub struct $name {
            _private: [u8; 0],
            _not_send_sync_unpin: PhantomData<(*mut u8, PhantomPinned)>,
        }
    )*};
}
opaque!(ucp_context, ucp_config_t, ucp_worker, ucp_ep, ucp_mem, ucp_address_t);

pub type ucp_context_h = *mut ucp_context;
pub type ucp_worker_h = *mut ucp_worker;
pub type ucp_ep_h = *mut ucp_ep;
pub type ucp_mem_h = *mut ucp_mem;

// enum ucp_params_field
pub const UCP_PARAM_FIELD_FEATURES: u64 = 1 << 0;
// enum ucp_feature
pub const UCP_FEATURE_WAKEUP: u64 = 1 << 4;
pub const UCP_FEATURE_AM: u64 = 1 << 6;
// enum ucp_worker_params_field
pub const UCP_WORKER_PARAM_FIELD_THREAD_MODE: u64 = 1 << 0;
pub const UCP_WORKER_PARAM_FIELD_EVENTS: u64 = 1 << 2;
// ucs_thread_mode_t
pub const UCS_THREAD_MODE_SINGLE: c_enum = 0;
// ucp_wakeup_event_t
pub const UCP_WAKEUP_TX: c_uint = 1 << 10;
pub const UCP_WAKEUP_RX: c_uint = 1 << 11;
// enum ucp_ep_params_field
pub const UCP_EP_PARAM_FIELD_REMOTE_ADDRESS: u64 = 1 << 0;
pub const UCP_EP_PARAM_FIELD_ERR_HANDLING_MODE: u64 = 1 << 1;
pub const UCP_EP_PARAM_FIELD_ERR_HANDLER: u64 = 1 << 2;
// ucp_err_handling_mode_t
pub const UCP_ERR_HANDLING_MODE_NONE: c_enum = 0;
pub const UCP_ERR_HANDLING_MODE_PEER: c_enum = 1;
// ucp_ep_close_flags_t
pub const UCP_EP_CLOSE_FLAG_FORCE: u32 = 1 << 0;
// ucp_op_attr_t
pub const UCP_OP_ATTR_FIELD_CALLBACK: u32 = 1 << 1;
pub const UCP_OP_ATTR_FIELD_USER_DATA: u32 = 1 << 2;
pub const UCP_OP_ATTR_FIELD_DATATYPE: u32 = 1 << 3;
pub const UCP_OP_ATTR_FIELD_FLAGS: u32 = 1 << 4;
// enum ucp_dt_type
pub const UCP_DATATYPE_CONTIG: ucp_datatype_t = 0;
pub const UCP_DATATYPE_IOV: ucp_datatype_t = 2;
pub const UCP_DATATYPE_SHIFT: ucp_datatype_t = 3;
// ucp_am_recv_attr_t
pub const UCP_AM_RECV_ATTR_FLAG_RNDV: u64 = 1 << 17;
// enum ucp_am_handler_param_field
pub const UCP_AM_HANDLER_PARAM_FIELD_ID: u64 = 1 << 0;
pub const UCP_AM_HANDLER_PARAM_FIELD_FLAGS: u64 = 1 << 1;
pub const UCP_AM_HANDLER_PARAM_FIELD_CB: u64 = 1 << 2;
pub const UCP_AM_HANDLER_PARAM_FIELD_ARG: u64 = 1 << 3;
// enum ucp_am_cb_flags
pub const UCP_AM_FLAG_WHOLE_MSG: u32 = 1 << 0;
// enum ucp_mem_map_params_field
pub const UCP_MEM_MAP_PARAM_FIELD_ADDRESS: u64 = 1 << 0;
pub const UCP_MEM_MAP_PARAM_FIELD_LENGTH: u64 = 1 << 1;
// ucp_version.h
pub const UCP_API_MAJOR: c_uint = 1;
pub const UCP_API_MINOR: c_uint = 13;

/// `ucp_dt_make_contig(elem_size)`.
pub const fn ucp_dt_make_contig(elem_size: usize) -> ucp_datatype_t {
    ((elem_size as ucp_datatype_t) << UCP_DATATYPE_SHIFT) | UCP_DATATYPE_CONTIG
}

/// `UCS_PTR_IS_PTR(ptr)`: a request, neither NULL nor an error.
pub fn ucs_ptr_is_ptr(ptr: ucs_status_ptr_t) -> bool {
    (ptr as usize).wrapping_sub(1) < (UCS_ERR_LAST as isize as usize).wrapping_sub(1)
}

/// `UCS_PTR_RAW_STATUS(ptr)`: the status an error pointer carries (`UCS_OK` for NULL).
pub fn ucs_ptr_raw_status(ptr: ucs_status_ptr_t) -> ucs_status_t {
    ptr as isize as ucs_status_t
}

pub type ucp_request_init_callback_t = Option<unsafe extern "C" fn(request: *mut c_void)>;
pub type ucp_request_cleanup_callback_t = Option<unsafe extern "C" fn(request: *mut c_void)>;
pub type ucp_send_nbx_callback_t =
    Option<unsafe extern "C" fn(request: *mut c_void, status: ucs_status_t, user_data: *mut c_void)>;
pub type ucp_am_recv_data_nbx_callback_t =
    Option<unsafe extern "C" fn(request: *mut c_void, status: ucs_status_t, length: usize, user_data: *mut c_void)>;
pub type ucp_err_handler_cb_t = Option<unsafe extern "C" fn(arg: *mut c_void, ep: ucp_ep_h, status: ucs_status_t)>;
pub type ucp_am_recv_callback_t = Option<
    unsafe extern "C" fn(
        arg: *mut c_void,
        header: *const c_void,
        header_length: usize,
        data: *mut c_void,
        length: usize,
        param: *const ucp_am_recv_param_t,
    ) -> ucs_status_t,
>;

/// `ucp_params_t`.
#[repr(C)]
pub struct ucp_params_t {
    pub field_mask: u64,
    pub features: u64,
    pub request_size: usize,
    pub request_init: ucp_request_init_callback_t,
    pub request_cleanup: ucp_request_cleanup_callback_t,
    pub tag_sender_mask: u64,
    pub mt_workers_shared: c_int,
    pub estimated_num_eps: usize,
    pub estimated_num_ppn: usize,
    pub name: *const c_char,
}

/// The `unsigned long`s of a `ucs_cpu_set_t`: `UCS_CPU_SETSIZE` (1024) bits.
pub const UCS_CPU_SET_WORDS: usize = 1024 / c_ulong::BITS as usize;

/// `ucs_cpu_set_t`.
#[repr(C)]
pub struct ucs_cpu_set_t {
    pub ucs_bits: [c_ulong; UCS_CPU_SET_WORDS],
}

/// `ucp_worker_params_t`.
#[repr(C)]
pub struct ucp_worker_params_t {
    pub field_mask: u64,
    pub thread_mode: c_enum,
    pub cpu_mask: ucs_cpu_set_t,
    pub events: c_uint,
    pub user_data: *mut c_void,
    pub event_fd: c_int,
    pub flags: u64,
    pub name: *const c_char,
    pub am_alignment: usize,
    pub client_id: u64,
}

/// `ucp_err_handler_t`.
#[repr(C)]
pub struct ucp_err_handler_t {
    pub cb: ucp_err_handler_cb_t,
    pub arg: *mut c_void,
}

/// `ucs_sock_addr_t` (unused here but part of `ucp_ep_params_t`).
#[repr(C)]
pub struct ucs_sock_addr_t {
    pub addr: *const c_void,
    pub addrlen: u32,
}

/// `ucp_ep_params_t`.
#[repr(C)]
pub struct ucp_ep_params_t {
    pub field_mask: u64,
    pub address: *const ucp_address_t,
    pub err_mode: c_enum,
    pub err_handler: ucp_err_handler_t,
    pub user_data: *mut c_void,
    pub flags: c_uint,
    pub sockaddr: ucs_sock_addr_t,
    pub conn_request: *mut c_void,
    pub name: *const c_char,
    pub local_sockaddr: ucs_sock_addr_t,
}

/// The callback union `cb` of `ucp_request_param_t` (only the members used here).
#[repr(C)]
#[derive(Clone, Copy)]
pub union ucp_request_param_cb {
    pub send: ucp_send_nbx_callback_t,
    pub recv_am: ucp_am_recv_data_nbx_callback_t,
}

/// The union `recv_info` of `ucp_request_param_t`.
#[repr(C)]
#[derive(Clone, Copy)]
pub union ucp_request_param_recv_info {
    pub length: *mut usize,
    pub tag_info: *mut c_void,
}

/// `ucp_request_param_t`.
#[repr(C)]
pub struct ucp_request_param_t {
    pub op_attr_mask: u32,
    pub flags: u32,
    pub request: *mut c_void,
    pub cb: ucp_request_param_cb,
    pub datatype: ucp_datatype_t,
    pub user_data: *mut c_void,
    pub reply_buffer: *mut c_void,
    pub memory_type: c_enum,
    pub recv_info: ucp_request_param_recv_info,
    pub memh: ucp_mem_h,
}

impl ucp_request_param_t {
    /// A parameter block with nothing set (`op_attr_mask` 0), as `= {0}` in C.
    pub fn empty() -> ucp_request_param_t {
        ucp_request_param_t {
            op_attr_mask: 0,
            flags: 0,
            request: std::ptr::null_mut(),
            cb: ucp_request_param_cb { send: None },
            datatype: 0,
            user_data: std::ptr::null_mut(),
            reply_buffer: std::ptr::null_mut(),
            memory_type: 0,
            recv_info: ucp_request_param_recv_info { length: std::ptr::null_mut() },
            memh: std::ptr::null_mut(),
        }
    }
}

/// `ucp_dt_iov_t`.
#[repr(C)]
pub struct ucp_dt_iov_t {
    pub buffer: *mut c_void,
    pub length: usize,
}

/// `ucp_am_handler_param_t`.
#[repr(C)]
pub struct ucp_am_handler_param_t {
    pub field_mask: u64,
    pub id: c_uint,
    pub flags: u32,
    pub cb: ucp_am_recv_callback_t,
    pub arg: *mut c_void,
}

/// `ucp_am_recv_param_t`.
#[repr(C)]
pub struct ucp_am_recv_param_t {
    pub recv_attr: u64,
    pub reply_ep: ucp_ep_h,
}

/// `ucp_mem_map_params_t`.
#[repr(C)]
pub struct ucp_mem_map_params_t {
    pub field_mask: u64,
    pub address: *mut c_void,
    pub length: usize,
    pub flags: c_uint,
    pub prot: c_uint,
    pub memory_type: c_enum,
}

unsafe extern "C" {
    // libucs
    pub fn ucs_status_string(status: ucs_status_t) -> *const c_char;

    // libucp: configuration and context
    pub fn ucp_config_read(
        env_prefix: *const c_char,
        filename: *const c_char,
        config_p: *mut *mut ucp_config_t,
    ) -> ucs_status_t;
    pub fn ucp_config_modify(config: *mut ucp_config_t, name: *const c_char, value: *const c_char) -> ucs_status_t;
    pub fn ucp_config_release(config: *mut ucp_config_t);
    pub fn ucp_get_version_string() -> *const c_char;
    pub fn ucp_init_version(
        api_major_version: c_uint,
        api_minor_version: c_uint,
        params: *const ucp_params_t,
        config: *const ucp_config_t,
        context_p: *mut ucp_context_h,
    ) -> ucs_status_t;
    pub fn ucp_cleanup(context: ucp_context_h);
    pub fn ucp_context_print_info(context: ucp_context_h, stream: *mut libc::FILE);

    // worker
    pub fn ucp_worker_create(
        context: ucp_context_h,
        params: *const ucp_worker_params_t,
        worker_p: *mut ucp_worker_h,
    ) -> ucs_status_t;
    pub fn ucp_worker_destroy(worker: ucp_worker_h);
    pub fn ucp_worker_get_address(
        worker: ucp_worker_h,
        address_p: *mut *mut ucp_address_t,
        address_length_p: *mut usize,
    ) -> ucs_status_t;
    pub fn ucp_worker_release_address(worker: ucp_worker_h, address: *mut ucp_address_t);
    pub fn ucp_worker_get_efd(worker: ucp_worker_h, fd: *mut c_int) -> ucs_status_t;
    pub fn ucp_worker_arm(worker: ucp_worker_h) -> ucs_status_t;
    pub fn ucp_worker_progress(worker: ucp_worker_h) -> c_uint;
    pub fn ucp_worker_set_am_recv_handler(worker: ucp_worker_h, param: *const ucp_am_handler_param_t) -> ucs_status_t;

    // endpoints
    pub fn ucp_ep_create(worker: ucp_worker_h, params: *const ucp_ep_params_t, ep_p: *mut ucp_ep_h) -> ucs_status_t;
    pub fn ucp_ep_close_nbx(ep: ucp_ep_h, param: *const ucp_request_param_t) -> ucs_status_ptr_t;

    // active messages
    pub fn ucp_am_send_nbx(
        ep: ucp_ep_h,
        id: c_uint,
        header: *const c_void,
        header_length: usize,
        buffer: *const c_void,
        count: usize,
        param: *const ucp_request_param_t,
    ) -> ucs_status_ptr_t;
    pub fn ucp_am_recv_data_nbx(
        worker: ucp_worker_h,
        data_desc: *mut c_void,
        buffer: *mut c_void,
        count: usize,
        param: *const ucp_request_param_t,
    ) -> ucs_status_ptr_t;
    pub fn ucp_am_data_release(worker: ucp_worker_h, data: *mut c_void);

    // requests
    pub fn ucp_request_check_status(request: *mut c_void) -> ucs_status_t;
    pub fn ucp_request_free(request: *mut c_void);

    // memory
    pub fn ucp_mem_map(
        context: ucp_context_h,
        params: *const ucp_mem_map_params_t,
        memh_p: *mut ucp_mem_h,
    ) -> ucs_status_t;
    pub fn ucp_mem_unmap(context: ucp_context_h, memh: ucp_mem_h) -> ucs_status_t;
}
