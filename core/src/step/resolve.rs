//! What a step is asked for: the user's request over the site's
//! settings, resolved once, where the request is parsed once
//! ([`crate::settings::option::OptionRequest`]).

use crate::settings::config::Config;
use crate::settings::option::{Choice, OptionRequest};

/// What the user and the site together ask of a step: the final answer
/// every rule reads (the method, or none; verbose; MPS asked).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Resolved {
    /// The method the step is mapped with, or `none`.
    pub choice: Choice,
    pub(crate) verbose: bool,
    /// The user gave the option (a method or `verbose`), not only the site
    /// default: only then does a step without GPUs say so.
    pub(crate) asked: bool,
    /// The user asked for MPS (`mps`).
    pub mps: bool,
}

/// The method and verbosity for a step: the user's request (`None`: none
/// given) over the site's settings.
pub fn resolve(request: Option<OptionRequest>, config: &Config) -> Resolved {
    let (choice, verbose, asked, mps) = match request {
        Some(OptionRequest::Use {
            choice: Some(choice),
            verbose,
            mps,
        }) => (
            choice,
            verbose || config.verbose,
            choice != Choice::Off,
            mps,
        ),
        Some(OptionRequest::Use {
            choice: None,
            verbose,
            mps,
        }) => (config.default, verbose || config.verbose, true, mps),
        // Help never reaches a node: srun, sbatch and salloc exit on it.
        Some(OptionRequest::Help) | None => (config.default, config.verbose, false, false),
    };
    Resolved {
        choice,
        verbose,
        asked,
        mps,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::method::Method;
    use crate::settings::site::parse_args;
    use crate::step::testing::*;

    #[test]
    fn resolve_prefers_the_user() {
        let config = parse_args(&["default=roundrobin"]).unwrap();
        let rr = Choice::Map(Method::RoundRobin);
        let c = Choice::Map(Method::Contiguous);
        let got = |request: Option<OptionRequest>| {
            let r = resolve(request, &config);
            (r.choice, r.verbose, r.asked)
        };
        assert_eq!(got(None), (rr, false, false));
        assert_eq!(got(Some(asking(Choice::Off))), (Choice::Off, false, false));
        let verbose = |choice| OptionRequest::Use {
            choice,
            verbose: true,
            mps: false,
        };
        assert_eq!(got(Some(verbose(Some(c)))), (c, true, true));
        assert_eq!(got(Some(verbose(None))), (rr, true, true));
    }
}
