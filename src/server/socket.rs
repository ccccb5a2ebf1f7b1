//! Socket options the standard library does not offer. Linux grows a socket's send buffer by
//! itself up to megabytes (`tcp_wmem`), which for an event stream to a client that stopped
//! reading means tens of thousands of tokens queued before a write ever blocks; a fixed send
//! buffer makes such a client block the writer after a bounded amount, so the write timeout
//! cuts it.

use std::net::TcpStream;

/// Fixes `stream`'s send buffer at about `bytes` (the kernel may double it), turning off its
/// automatic growth. Best effort: on failure the buffer stays as it was.
#[cfg(unix)]
pub fn limit_send_buffer(stream: &TcpStream, bytes: usize) {
    use std::os::fd::AsRawFd;
    let size = libc::c_int::try_from(bytes).unwrap_or(libc::c_int::MAX);
    // SAFETY: `stream` owns a live socket descriptor for the duration of the call, and the
    // option value is a c_int whose exact size is passed.
    unsafe {
        libc::setsockopt(
            stream.as_raw_fd(),
            libc::SOL_SOCKET,
            libc::SO_SNDBUF,
            (&size as *const libc::c_int).cast(),
            std::mem::size_of::<libc::c_int>() as libc::socklen_t,
        );
    }
}

#[cfg(not(unix))]
pub fn limit_send_buffer(_stream: &TcpStream, _bytes: usize) {}
