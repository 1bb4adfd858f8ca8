// MPI return code -> Failure, with the MPI library's own message.
#include "mpi/mpi_check.h"

#include <cstring>

namespace ft {

Failure MpiFailure(int rc, const char* call, const char* file, int line) {
  int errorClass = rc;
  MPI_Error_class(rc, &errorClass);
  char text[MPI_MAX_ERROR_STRING] = {0};
  int length = 0;
  MPI_Error_string(rc, text, &length);
  const char* base = std::strrchr(file, '/');
  std::string where = std::string(base ? base + 1 : file) + ":" + std::to_string(line);
  // `call` is the C expression; keep just the function name.
  std::string name(call);
  name = name.substr(0, name.find('('));
  return Failure{FailureKind::kMpi, errorClass,
                 std::string(text, length) + " (" + name + " at " + where + ")"};
}

}  // namespace ft
