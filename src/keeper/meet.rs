//! Where a step's tasks meet its keeper, and what the keeper answers.

use std::path::PathBuf;

/// The longest request line a client sends, newline included.
pub(super) const MAX_REQUEST: u64 = 16;

/// What a client asks the keeper, in one line it writes first.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Request {
    /// A task about to start: the daemon's directory, or why none.
    Join,
    /// A task of the step has ended (its task epilog asks): where it was
    /// the node's last, the keeper ends the daemon and removes its
    /// directory before it answers [`Ended::Done`].
    Ended,
}

impl Request {
    pub(super) fn line(self) -> &'static str {
        match self {
            Request::Join => "join\n",
            Request::Ended => "ended\n",
        }
    }

    pub(super) fn parse(line: &str) -> Option<Request> {
        match line {
            "join" => Some(Request::Join),
            "ended" => Some(Request::Ended),
            _ => None,
        }
    }
}

/// The keeper's answer to [`Request::Ended`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Ended {
    /// Other tasks of the step live on this node: the keeper goes on.
    Later,
    /// The daemon is stopped and its directory gone, or no keeper runs.
    Done,
}

impl Ended {
    pub(super) fn line(self) -> &'static str {
        match self {
            Ended::Later => "later\n",
            Ended::Done => "done\n",
        }
    }

    pub(super) fn parse(line: &str) -> Option<Ended> {
        match line {
            "later" => Some(Ended::Later),
            "done" => Some(Ended::Done),
            _ => None,
        }
    }
}

/// What the keeper answers each task.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum Answer {
    /// The daemon serves, in the directory with this token in this base.
    Ok { token: u32, base: PathBuf },
    /// No daemon serves: why.
    No(String),
}

impl Answer {
    pub(super) fn line(&self) -> String {
        match self {
            Answer::Ok { token, base } => format!("ok {token:08x} {}\n", base.display()),
            Answer::No(why) => format!("no {}\n", why.replace('\n', " ")),
        }
    }

    pub(super) fn parse(line: &str) -> Option<Answer> {
        let (word, rest) = line.split_once(' ')?;
        match word {
            "ok" => {
                let (token, base) = rest.split_once(' ')?;
                let token = u32::from_str_radix(token, 16).ok()?;
                let base = PathBuf::from(base);
                base.is_absolute().then_some(Answer::Ok { token, base })
            }
            "no" => Some(Answer::No(rest.to_string())),
            _ => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn answers_cross_the_socket_as_written() {
        let ok = Answer::Ok {
            token: 0xab,
            base: PathBuf::from("/tmp/a task's dir"),
        };
        for answer in [ok, Answer::No("no server; said".to_string())] {
            let line = answer.line();
            assert!(
                line.ends_with('\n') && line.matches('\n').count() == 1,
                "{line:?}"
            );
            assert_eq!(Answer::parse(line.trim_end()), Some(answer));
        }
        assert_eq!(Answer::No("two\nlines".into()).line(), "no two lines\n");
        for request in [Request::Join, Request::Ended] {
            let line = request.line();
            assert!(line.len() as u64 <= MAX_REQUEST, "{line:?}");
            assert_eq!(Request::parse(line.trim_end()), Some(request));
        }
        for ended in [Ended::Later, Ended::Done] {
            assert_eq!(Ended::parse(ended.line().trim_end()), Some(ended));
        }
        assert_eq!(Request::parse("join "), None);
        for bad in ["", "ok", "ok zz /tmp", "yes 1", "ok  1", "ok 1", "ok 1 tmp"] {
            assert_eq!(Answer::parse(bad), None, "{bad:?}");
        }
    }
}
