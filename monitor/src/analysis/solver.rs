//! The cvc5 solver, a process of its own that `cedar-policy-symcc` talks
//! SMT-LIB to: found by `CVC5` or on `PATH`, started with a time limit per
//! question, started again after it fails. Every answer is proved,
//! a counterexample, or unknown with the solver's reason; nothing else.

use std::path::{Path, PathBuf};
use std::time::Duration;

use cedar_policy_symcc::solver::LocalSolver;
use cedar_policy_symcc::{CedarSymCompiler, CompiledPolicy, CompiledPolicySet, Env};

/// What the solver said to one question.
#[derive(Debug)]
pub(crate) enum Answer {
    /// No request makes the question true.
    Proved,
    /// A request (with its entities) that does.
    Counterexample(Box<Env>),
    /// The solver did not say (its time limit, its error): never read as proved.
    Unknown(String),
}

/// A solver process and the compiler that talks to it.
pub struct Solver {
    path: PathBuf,
    limit: Duration,
    compiler: Option<CedarSymCompiler<LocalSolver>>,
}

/// Where the cvc5 executable is: `CVC5`, else `cvc5` on `PATH`.
pub fn find_cvc5() -> Result<PathBuf, String> {
    if let Some(named) = std::env::var_os("CVC5").filter(|v| !v.is_empty()) {
        let path = PathBuf::from(named);
        return if is_executable(&path) {
            Ok(path)
        } else {
            Err(format!("CVC5 names `{}`, which is not an executable file", path.display()))
        };
    }
    std::env::var_os("PATH")
        .iter()
        .flat_map(std::env::split_paths)
        .map(|dir| dir.join("cvc5"))
        .find(|path| is_executable(path))
        .ok_or_else(|| {
            "the cvc5 solver is needed for proofs and was found neither in CVC5 nor on PATH \
             (Debian: apt-get install cvc5)"
                .to_owned()
        })
}

fn is_executable(path: &Path) -> bool {
    use std::os::unix::fs::PermissionsExt;
    std::fs::metadata(path).is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
}

impl Solver {
    /// A solver that gives each question at most `limit`.
    pub fn new(limit: Duration) -> Result<Self, String> {
        Ok(Self { path: find_cvc5()?, limit, compiler: None })
    }

    fn compiler(&mut self) -> Result<&mut CedarSymCompiler<LocalSolver>, String> {
        if self.compiler.is_none() {
            let limit = format!("--tlimit-per={}", self.limit.as_millis().max(1));
            // `like` patterns are string constraints cvc5 1.0 decides only
            // with its extended string solver.
            let mut command = tokio::process::Command::new(&self.path);
            command.args(["--lang", "smt", &limit, "--strings-exp"]).kill_on_drop(true);
            let solver = LocalSolver::from_command(&mut command)
                .map_err(|e| format!("cannot start cvc5 at {}: {e}", self.path.display()))?;
            let compiler = CedarSymCompiler::new(solver).map_err(|e| e.to_string())?;
            self.compiler = Some(compiler);
        }
        self.compiler.as_mut().ok_or_else(|| "no solver".to_owned())
    }

    /// Is there a request `a` allows and `b` does not?
    pub(crate) async fn implies(&mut self, a: &CompiledPolicySet, b: &CompiledPolicySet) -> Answer {
        let compiler = match self.compiler() {
            Ok(compiler) => compiler,
            Err(e) => return Answer::Unknown(e),
        };
        let answer = compiler.check_implies_with_counterexample_opt(a, b).await;
        self.answer(answer)
    }

    /// Is there a request on which `policy` fails to evaluate?
    pub(crate) async fn errors(&mut self, policy: &CompiledPolicy) -> Answer {
        let compiler = match self.compiler() {
            Ok(compiler) => compiler,
            Err(e) => return Answer::Unknown(e),
        };
        let answer = compiler.check_never_errors_with_counterexample_opt(policy).await;
        self.answer(answer)
    }

    fn answer(&mut self, answer: Result<Option<Env>, cedar_policy_symcc::err::Error>) -> Answer {
        match answer {
            Ok(None) => Answer::Proved,
            Ok(Some(env)) => Answer::Counterexample(Box::new(env)),
            Err(e) => {
                // A solver that failed may be in any state: the next
                // question starts a fresh one.
                self.compiler = None;
                let why = match e {
                    cedar_policy_symcc::err::Error::SolverUnknown => {
                        format!("the solver gave no answer within {} ms", self.limit.as_millis())
                    }
                    other => format!("the solver failed: {other}"),
                };
                Answer::Unknown(why)
            }
        }
    }
}
