//! The URLs Gemini CLI's `web_fetch` fetches from its prompt (pure).

use crate::touch::is_js_space;

/// The most URLs one prompt may name: Gemini CLI's own ("up to 20").
pub const MAX_URLS: usize = 20;

/// Every http(s) URL in `text`, in order, each once, as any Gemini CLI
/// reads its prompt. 0.61.0 (`parsePrompt` in `web-fetch.ts`) splits the
/// text on JavaScript's `\s` and takes each piece holding `://` that
/// `new URL` reads as http or https: the piece as it is, but for leading
/// and trailing C0 controls and spaces, its scheme in any case. Earlier
/// versions took `https?://` wherever it starts, up to the next white
/// space; such a URL inside a piece (`(https://x)`, `?next=http://y`) is
/// taken too, without the punctuation that closes it.
pub fn urls_in(text: &str) -> Vec<String> {
    let mut urls: Vec<String> = Vec::new();
    let mut push = |url: &str| {
        if !url.is_empty() && !urls.iter().any(|seen| seen == url) {
            urls.push(url.to_owned());
        }
    };
    for piece in text.split(is_js_space).filter(|piece| piece.contains("://")) {
        let piece = piece.trim_matches(|c: char| c <= ' ');
        // ASCII lower case keeps every byte where it was.
        let lower = piece.to_ascii_lowercase();
        if lower.starts_with("http:") || lower.starts_with("https:") {
            push(piece);
        }
        let starts = lower.match_indices("http://").chain(lower.match_indices("https://")).map(|(at, _)| at);
        let mut starts: Vec<usize> = starts.filter(|at| *at > 0).collect();
        starts.sort_unstable();
        for at in starts {
            if let Some(url) = piece.get(at..) {
                push(url.trim_end_matches([')', ']', '}', '>', '"', '\'', '`', '.', ',', ';', ':', '!', '?']));
            }
        }
    }
    urls
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_url_gemini_cli_could_fetch_is_found() {
        assert_eq!(
            urls_in("Summarize https://example.com/a and then http://169.254.169.254/latest/meta-data/"),
            ["https://example.com/a", "http://169.254.169.254/latest/meta-data/"]
        );
        // As 0.61.0 reads a piece: whole, the scheme in any case.
        assert_eq!(urls_in("see https://x.dev/post, please"), ["https://x.dev/post,"]);
        assert_eq!(urls_in("HTTP://A.example/"), ["HTTP://A.example/"]);
        assert_eq!(urls_in("\u{1}http://a.example/\u{7f}"), ["http://a.example/\u{7f}"]);
        assert_eq!(urls_in(r"http:\\a.example\x?q=://"), [r"http:\\a.example\x?q=://"]);
        // JavaScript's white space, the byte-order mark included.
        assert_eq!(urls_in("http://a.example/\u{a0}http://b.example/"), ["http://a.example/", "http://b.example/"]);
        assert_eq!(urls_in("http://a.example/\u{feff}http://b.example/"), ["http://a.example/", "http://b.example/"]);
        // Inside other text, as earlier versions found them.
        assert_eq!(urls_in("(http://a.example/x)."), ["http://a.example/x"]);
        assert_eq!(urls_in("(see http://a.example/x)."), ["http://a.example/x)."]);
        assert_eq!(
            urls_in("https://a.example/?next=http://b.example/"),
            ["https://a.example/?next=http://b.example/", "http://b.example/"]
        );
        assert_eq!(urls_in("twice https://a.example https://a.example"), ["https://a.example"]);
        assert!(urls_in("no urls, ftp://x.example and a://b").is_empty());
    }
}
