//! Escape sequences in prompt text, processed as llama.cpp does for `-p` and `-f`: `\n`, `\r`,
//! `\t`, `\'`, `\"`, `\\`, `\xHH`; any other backslash sequence is left as written.

/// Replaces the escape sequences of `s`.
pub fn process_escapes(s: &str) -> String {
    let bytes = s.as_bytes();
    let mut out: Vec<u8> = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] != b'\\' || i + 1 >= bytes.len() {
            out.push(bytes[i]);
            i += 1;
            continue;
        }
        let next = bytes[i + 1];
        let simple = match next {
            b'n' => Some(b'\n'),
            b'r' => Some(b'\r'),
            b't' => Some(b'\t'),
            b'\'' => Some(b'\''),
            b'"' => Some(b'"'),
            b'\\' => Some(b'\\'),
            _ => None,
        };
        if let Some(c) = simple {
            out.push(c);
            i += 2;
        } else if next == b'x'
            && i + 3 < bytes.len()
            && hex(bytes[i + 2]).is_some()
            && hex(bytes[i + 3]).is_some()
        {
            out.push(hex(bytes[i + 2]).unwrap() * 16 + hex(bytes[i + 3]).unwrap());
            i += 4;
        } else {
            out.push(b'\\');
            out.push(next);
            i += 2;
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

fn hex(c: u8) -> Option<u8> {
    (c as char).to_digit(16).map(|d| d as u8)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn escapes() {
        assert_eq!(process_escapes(r"a\nb\tc\\d"), "a\nb\tc\\d");
        assert_eq!(process_escapes(r#"\"q\" \'s\'"#), "\"q\" 's'");
        assert_eq!(process_escapes(r"\x41\x4a"), "AJ");
        assert_eq!(process_escapes(r"\q \x4"), r"\q \x4");
        assert_eq!(process_escapes("end\\"), "end\\");
    }
}
