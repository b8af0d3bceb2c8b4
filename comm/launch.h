// Launch detection: which rank of how many this process is, as the launcher that started it
// says through the environment.
//
// Launchers, in the order they are looked for. The innermost launcher wins, because an outer
// launcher's variables leak into the processes of an inner one — mpirun inside an sbatch script
// inherits SLURM_PROCID=0, and `srun … torchrun` gives each worker srun's SLURM_PROCID (its
// node's task) next to torchrun's RANK:
//   "openmpi"  Open MPI's mpirun: OMPI_COMM_WORLD_RANK, _SIZE, _LOCAL_RANK, _LOCAL_SIZE
//   "mpich"    MPICH's Hydra mpiexec (and other PMI-1 launchers): PMI_RANK, PMI_SIZE,
//              MPI_LOCALRANKID, MPI_LOCALNRANKS
//   "torchrun" a torchrun worker: RANK with TORCHELASTIC_RUN_ID (which torchrun sets for every
//              worker and nothing else does); it wins over an srun step's variables
//   "slurm"    an srun job step: SLURM_PROCID with SLURM_STEP_ID (the batch script itself has
//              SLURM_PROCID but is not a step of N tasks), SLURM_STEP_NUM_TASKS (or SLURM_NTASKS),
//              SLURM_LOCALID, and the step's tasks on this node from SLURM_STEP_TASKS_PER_NODE
//              (or SLURM_TASKS_PER_NODE; "2(x3),1" format) at index SLURM_NODEID
//   "torchrun" torchrun-style variables set by hand, without TORCHELASTIC_RUN_ID: RANK,
//              WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE (RANK/WORLD_SIZE without the local pair
//              means one node); an srun step's variables win over these
//   "none"     none of them: a single process, rank 0 of 1.
// MPI launchers win over torchrun's variables: nobody starts mpirun from inside torchrun, while a
// shell that ran torchrun once may still export RANK.
//
// Under torchrun the ranks find each other through rank 0's TCP rendezvous
// (comm/tcp_rendezvous.h) at MASTER_ADDR and a port: ZS_RENDEZVOUS_PORT when set; else
// MASTER_PORT + 1 when TORCHELASTIC_USE_AGENT_STORE=True (torchrun's agent on node 0 then serves
// its own store on MASTER_PORT); else MASTER_PORT.
// A variable that is set but malformed (not a number, negative, rank ≥ size, a rank without
// its size) throws InvalidArgument naming the variable and its value.
//
// Pure functions of the environment; thread-safe as long as nobody modifies the environment
// concurrently (setenv is not thread-safe in glibc).
#pragma once

#include <functional>
#include <string>

namespace zs::comm {

struct LaunchInfo {
  int rank = 0;
  int world_size = 1;
  int local_rank = 0;             // rank among the processes of this node
  int local_size = 1;             // processes of this job on this node
  std::string launcher = "none";  // "openmpi", "mpich", "slurm", "torchrun", "none"
  // torchrun only, when MASTER_ADDR and MASTER_PORT are set: rank 0's TCP rendezvous (above);
  // rendezvous_port_from names where the port came from, for error messages.
  std::string rendezvous_host;
  int rendezvous_port = 0;
  std::string rendezvous_port_from;

  // True when an MPI launcher started the process (openmpi, mpich, slurm): MPI_Init will find
  // its peers.
  bool by_mpi_launcher() const;
  // "rank 1 of 4 (local 1 of 2) launched by openmpi".
  std::string describe() const;
};

// Reads the process environment.
LaunchInfo detect_launch();

// The same, reading variables through `getenv` (returns null for an unset variable).
LaunchInfo detect_launch(const std::function<const char*(const char*)>& getenv);

}  // namespace zs::comm
