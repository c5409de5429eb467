// A consumer of the installed recsdk::mpi: checks that it links, with MPI found through recsdk's
// package config (find_package(recsdk COMPONENTS mpi)).
#include <cstdio>

// recsdk::mpi has no public header yet: the public rank APIs (recsdk/distributed.h) are the
// next slice of issue 24. Until then this declares the one function the program calls.
namespace recsdk::dist {
void RegisterMpiCommunicator();
}  // namespace recsdk::dist

int main() {
  recsdk::dist::RegisterMpiCommunicator();  // records a factory; starts no MPI
  std::printf("recsdk::mpi consumer: linked and registered\n");
  return 0;
}
