// Checks MPI return codes on the comm thread: a failure becomes an MpiException that keeps the MPI
// error class, MPI's own message and the file:line of the call, and is turned into a typed JS
// error in one place (errors.cc).
#pragma once
#include <mpi.h>
#include <stdexcept>
#include <string>

namespace ft {

// What went wrong in an operation, carried from the comm thread to the main thread.
enum class FailureKind { kMpi, kNotSupported, kUsage, kTimeout };

struct Failure {
  FailureKind kind;
  int errorClass;  // MPI error class for kMpi, else 0
  std::string message;
};

class OpException : public std::runtime_error {
 public:
  explicit OpException(Failure failure)
      : std::runtime_error(failure.message), failure_(std::move(failure)) {}
  const Failure& failure() const { return failure_; }
  Failure& failure() { return failure_; }

 private:
  Failure failure_;
};

// MPI's class and text for return code `rc`, with the call and where it was made.
Failure MpiFailure(int rc, const char* call, const char* file, int line);

}  // namespace ft

#define MPI_CHECK(call)                                                          \
  do {                                                                           \
    int mpi_check_rc_ = (call);                                                  \
    if (mpi_check_rc_ != MPI_SUCCESS)                                            \
      throw ::ft::OpException(::ft::MpiFailure(mpi_check_rc_, #call, __FILE__, __LINE__)); \
  } while (0)

// A ULFM call this MPI build lacks: fail loudly, never a silent no-op.
#define NOT_SUPPORTED(name)                                                       \
  throw ::ft::OpException(::ft::Failure{::ft::FailureKind::kNotSupported, 0,      \
                                        name " is not supported by this MPI build (no ULFM)"})
