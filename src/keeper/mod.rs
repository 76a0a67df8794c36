//! exec's CUDA MPS: one control daemon per step and node, as the plugin's
//! (the same [`desi_gpu_map_core::mps::Daemon`], started and stopped by
//! [`desi_gpu_map_host::mps::daemon`]),
//! where no plugin runs one. exec replaces itself with the application,
//! so something else must outlive the node's tasks and end the daemon:
//! the **keeper**, one small process per step and node.
//!
//! - The node's tasks meet at an abstract socket named after the daemon's
//!   directory stem (`dgm-mps.UID.JOBID.STEPID.NODEID.k`):
//!   nothing on disk, and gone with the process that holds it. The first
//!   task to bind it starts the keeper, which holds it from then on; every
//!   task then connects, asks `join`, and is answered `ok TOKEN BASE` (the
//!   daemon's directory, whatever each task's own `TMPDIR`) or `no WHY`
//!   (the step runs without MPS).
//! - A task epilog (`SLURM_TASK_EPILOG`) asks `ended` after its task is
//!   reaped. Where no task of the node lives any more, the keeper ends the
//!   daemon and removes its directory first, then answers `done`; else
//!   `later`. slurmstepd waits for the epilog (up to 5 s) before it kills
//!   what is left of the step, so with an epilog the end is deterministic,
//!   even under proctrack/cgroup on a busy node (`task_ended`).
//! - That name can be foreseen, and another user may hold it first. So
//!   the keeper also listens on a socket inside its directory
//!   ([`desi_gpu_map_core::mps::KeeperAddr::socket_in`]),
//!   which only the job's user can reach (mode 0700) and no one else can
//!   make: where another user holds the name, the node's local task 0
//!   starts the keeper without it, and every task finds the keeper by its
//!   directory, a directory of the job's user's own (`join`). A listener
//!   that accepts nothing fills its queue, and a connect to it would wait
//!   for ever: every connect to a keeper's socket is bounded (`reach`), a
//!   name whose queue stays full counts as another user's, and a task
//!   epilog tells the keeper by its directory too.
//! - Each end proves its peer is the job's user (`SO_PEERCRED`, read
//!   through [`desi_gpu_map_host::sys::peer_of`]), and the keeper takes
//!   only processes of its step: of its session (Slurm makes one per step;
//!   `getsid` needs no `/proc`, which `hidepid` hides) or under its
//!   slurmstepd; and only those it can see, in its pid namespace or below.
//!   A task in a pid namespace of its own (a container per task) is told
//!   why not; one that is its namespace's process 1 (or whose parent is)
//!   starts no keeper at all, since the kernel would kill the keeper with
//!   it, before it removed its directory. Each says why it runs without
//!   MPS, whatever its local id.
//! - The keeper holds a pidfd of every task that joined (a task prolog
//!   stands for its parent, the task) and of every
//!   process slurmstepd had forked when it started (all of the node's
//!   tasks: slurmstepd forks them all before it lets any run), so the
//!   node's **last** task's end is an event, however it ended (SIGKILL
//!   included). Then, or when slurmstepd itself is gone, or when a
//!   signal that ends a step reaches it, it removes the directory and
//!   kills the daemon
//!   ([`desi_gpu_map_host::mps::daemon::Running::end_now`]). A
//!   keeper killed by pid takes its daemon with it (the daemon's parent
//!   death signal, [`desi_gpu_map_host::sys::tie_to_parent`]).
//! - Under proctrack/cgroup Slurm kills what is left of a step about
//!   0.3 ms after its last task exits, and on a busy node that can come
//!   before the keeper has removed the directory. A keeper's directory is
//!   named as one ([`desi_gpu_map_core::mps::KeeperAddr`]) from the moment it is
//!   made, and every keeper first removes the user's keeper directories in
//!   its base whose keeper is gone (`sweep`): what one step leaves, the
//!   user's next `exec METHOD,mps` on that node removes. Processes are
//!   never left: the daemon and its server are in the step, which Slurm
//!   kills.
//! - It is detached (its parent exits at once): no task is its parent,
//!   and under proctrack/linuxproc it outlives the step's end to clean up.
//!   Under proctrack/cgroup it is in the step, and Slurm's signals reach
//!   it: it ends at once on TERM, INT, HUP or QUIT, and ignores the rest.
//!   It runs on slurmstepd's CPUs (the step's), not on the task's that
//!   started it, and holds none of that task's descriptors.
//!
//! Its files:
//!
//! - `command.rs`: its command line, declared once: parsed by clap in the
//!   keeper, written by the task that starts it ([`KeeperOpts::words`]),
//!   and read back by the same declaration from another keeper's
//!   `/proc/PID/cmdline` ([`KeeperOpts::read_back`]: its base and token,
//!   for `join`).
//! - `meet.rs`: where tasks meet the keeper, and the answer that crosses
//!   the socket.
//! - `reach.rs`: a connect to a keeper's socket that never waits past a
//!   bound (a full queue is tried again, then given up).
//! - `join.rs`: a task's side: meet the keeper, starting it if none runs,
//!   and take its answer.
//! - `serve.rs`: the keeper's process: start the daemon, answer the tasks,
//!   end it after the last.
//! - `sweep.rs`: directories a killed keeper left behind.
//! - `tally.rs`: when the node's tasks are all gone.

mod command;
mod join;
mod meet;
mod reach;
mod serve;
mod sweep;
mod tally;

pub use command::{KeeperOpts, KEEPER_COMMAND};
pub use join::{join, task_ended};
pub use serve::run;
