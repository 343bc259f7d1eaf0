//! The socket set-up that a client's and a server's connections share: addresses resolved, and
//! TCP sockets with the point's buffer sizes.

use super::{EngineError, io_err};
use std::net::{SocketAddr, ToSocketAddrs};

/// Resolves `host:port` to its first address.
pub(super) fn resolve(host_port: &str) -> Result<SocketAddr, EngineError> {
    host_port
        .to_socket_addrs()
        .map_err(io_err(format!("resolving {host_port}")))?
        .next()
        .ok_or_else(|| EngineError::Assignment(format!("{host_port} resolves to nothing")))
}

/// A TCP socket for `addr` with `buffer_bytes` of send and receive buffer.
pub(super) fn socket_for(addr: SocketAddr, buffer_bytes: u32) -> Result<socket2::Socket, EngineError> {
    let socket = socket2::Socket::new(socket2::Domain::for_address(addr), socket2::Type::STREAM, None)
        .map_err(io_err("creating a socket"))?;
    let bytes = buffer_bytes as usize;
    socket.set_send_buffer_size(bytes).map_err(io_err("setting SO_SNDBUF"))?;
    socket.set_recv_buffer_size(bytes).map_err(io_err("setting SO_RCVBUF"))?;
    Ok(socket)
}
