// MPI_T's control variables: found by name, read as a flag, written as an int.
#include "mpi/control_variables.h"

namespace ft {

std::optional<ControlVariable> ControlVariable::Find(const char* name) {
  int provided = 0;
  if (MPI_T_init_thread(MPI_THREAD_SINGLE, &provided) != MPI_SUCCESS) return std::nullopt;
  int index = 0;
  int count = 0;
  MPI_T_cvar_handle handle;
  if (MPI_T_cvar_get_index(name, &index) != MPI_SUCCESS ||
      MPI_T_cvar_handle_alloc(index, nullptr, &handle, &count) != MPI_SUCCESS) {
    return std::nullopt;
  }
  if (count != 1) {
    MPI_T_cvar_handle_free(&handle);
    return std::nullopt;
  }
  return ControlVariable(handle);
}

bool ControlVariable::IsSet() const {
  unsigned char value[16] = {0};  // a bool or an int: any byte set means true
  if (MPI_T_cvar_read(handle_, value) != MPI_SUCCESS) return false;
  for (unsigned char byte : value) {
    if (byte != 0) return true;
  }
  return false;
}

bool ControlVariable::Write(int value) const { return MPI_T_cvar_write(handle_, &value) == MPI_SUCCESS; }

}  // namespace ft
