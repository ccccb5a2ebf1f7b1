//! Socket options and checks the standard library does not offer. Linux grows a socket's send
//! buffer by itself up to megabytes (`tcp_wmem`), which for an event stream to a client that
//! stopped reading means tens of thousands of tokens queued before a write ever blocks; a fixed
//! send buffer makes such a client block the writer after a bounded amount, so the write
//! timeout cuts it. And whether a client has hung up, asked without blocking or consuming what
//! it sent (a UNIX socket has no stable `peek`).

use super::conn::Conn;

/// Fixes `socket`'s send buffer at about `bytes` (the kernel may double it), turning off its
/// automatic growth. Best effort: on failure the buffer stays as it was.
#[cfg(unix)]
pub fn limit_send_buffer(socket: &impl std::os::fd::AsRawFd, bytes: usize) {
    let size = libc::c_int::try_from(bytes).unwrap_or(libc::c_int::MAX);
    // SAFETY: `socket` owns a live socket descriptor for the duration of the call, and the
    // option value is a c_int whose exact size is passed.
    unsafe {
        libc::setsockopt(
            socket.as_raw_fd(),
            libc::SOL_SOCKET,
            libc::SO_SNDBUF,
            (&size as *const libc::c_int).cast(),
            std::mem::size_of::<libc::c_int>() as libc::socklen_t,
        );
    }
}

#[cfg(not(unix))]
pub fn limit_send_buffer<T>(_socket: &T, _bytes: usize) {}

/// True when the peer of `conn` has closed its side (or the socket failed); false while it is
/// open, whether or not it has sent anything.
#[cfg(unix)]
pub fn peer_closed(conn: &Conn) -> bool {
    use std::os::fd::AsRawFd;
    let fd = match conn {
        Conn::Tcp(s) => s.as_raw_fd(),
        Conn::Unix(s) => s.as_raw_fd(),
    };
    let mut byte = 0u8;
    // SAFETY: `fd` is the live socket `conn` owns for the duration of the call; the buffer is
    // one byte we own, and MSG_PEEK | MSG_DONTWAIT neither consumes data nor blocks.
    let n = unsafe {
        libc::recv(
            fd,
            (&mut byte as *mut u8).cast(),
            1,
            libc::MSG_PEEK | libc::MSG_DONTWAIT,
        )
    };
    match n {
        0 => true,
        n if n > 0 => false,
        _ => {
            let e = std::io::Error::last_os_error();
            !matches!(
                e.kind(),
                std::io::ErrorKind::WouldBlock | std::io::ErrorKind::Interrupted
            )
        }
    }
}

#[cfg(not(unix))]
pub fn peer_closed(conn: &Conn) -> bool {
    let Conn::Tcp(s) = conn;
    let mut byte = [0u8; 1];
    if s.set_nonblocking(true).is_err() {
        return true;
    }
    let r = s.peek(&mut byte);
    let _ = s.set_nonblocking(false);
    match r {
        Ok(0) => true,
        Ok(_) => false,
        Err(e) => e.kind() != std::io::ErrorKind::WouldBlock,
    }
}
