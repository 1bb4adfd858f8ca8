// MPI's control variables (MPI_T cvars) by name: how the comm thread reads Open MPI's settings and
// sets libnbc's algorithm per call. Comm thread only, like every MPI call.
#pragma once
#include <mpi.h>

#include <optional>

namespace ft {

class ControlVariable {
 public:
  // `name` of this MPI, or nothing where it has none (another MPI or version). MPI_T stays
  // initialized for the life of the process: the handles are kept.
  static std::optional<ControlVariable> Find(const char* name);

  // A bool or an int: whether it is set (false where it cannot be read).
  bool IsSet() const;
  // An int variable; false where MPI refused (read-only, bad value).
  bool Write(int value) const;

 private:
  explicit ControlVariable(MPI_T_cvar_handle handle) : handle_(handle) {}
  MPI_T_cvar_handle handle_;
};

}  // namespace ft
