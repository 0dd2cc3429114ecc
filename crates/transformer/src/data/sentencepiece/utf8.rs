//! UTF-8 as sentencepiece's C++ reads it (`util.h`): a character's length from its lead byte alone,
//! and the validity check that turns each bad byte into U+FFFD.

/// The byte length of the UTF-8 character starting with `lead`, as sentencepiece's `OneCharLen`
/// reads it from the lead byte alone (continuation and invalid bytes count as 1).
pub(super) fn one_char_len(lead: u8) -> usize {
    const LEN: [u8; 16] = [1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 2, 2, 3, 4];
    LEN[(lead >> 4) as usize] as usize
}

/// Sentencepiece's `IsValidDecodeUTF8`: whether `s` starts with a valid UTF-8 character, and how
/// many bytes it takes (1 for an invalid byte). Surrogates, overlong forms and values above
/// U+10FFFF are invalid.
pub(super) fn decode_utf8_prefix(s: &[u8]) -> (bool, usize) {
    let valid_cp = |c: u32| c < 0xD800 || (0xE000..=0x10FFFF).contains(&c);
    let trail = |b: u8| b & 0xC0 == 0x80;
    let b0 = s[0];
    if b0 < 0x80 {
        return (true, 1);
    }
    if s.len() >= 2 && b0 & 0xE0 == 0xC0 {
        let c = (u32::from(b0 & 0x1F) << 6) | u32::from(s[1] & 0x3F);
        if trail(s[1]) && c >= 0x80 && valid_cp(c) {
            return (true, 2);
        }
    } else if s.len() >= 3 && b0 & 0xF0 == 0xE0 {
        let c = (u32::from(b0 & 0x0F) << 12) | (u32::from(s[1] & 0x3F) << 6) | u32::from(s[2] & 0x3F);
        if trail(s[1]) && trail(s[2]) && c >= 0x800 && valid_cp(c) {
            return (true, 3);
        }
    } else if s.len() >= 4 && b0 & 0xF8 == 0xF0 {
        let c = (u32::from(b0 & 0x07) << 18)
            | (u32::from(s[1] & 0x3F) << 12)
            | (u32::from(s[2] & 0x3F) << 6)
            | u32::from(s[3] & 0x3F);
        if trail(s[1]) && trail(s[2]) && trail(s[3]) && c >= 0x10000 && valid_cp(c) {
            return (true, 4);
        }
    }
    (false, 1)
}
