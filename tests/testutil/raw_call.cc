#include "tests/testutil/raw_call.h"

#include <chrono>

#include "grpcpp/generic/generic_stub.h"

namespace mt::testutil {

RawCallResult RawCall(const std::shared_ptr<grpc::Channel>& channel, const std::string& method,
                      const std::string& request,
                      const std::vector<std::pair<std::string, std::string>>& metadata,
                      absl::Duration timeout) {
  grpc::GenericStub stub(channel);
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() +
                   std::chrono::milliseconds(absl::ToInt64Milliseconds(timeout)));
  for (const auto& [key, value] : metadata) ctx.AddMetadata(key, value);
  grpc::CompletionQueue cq;
  std::unique_ptr<grpc::GenericClientAsyncReaderWriter> call = stub.PrepareCall(&ctx, method, &cq);
  void* tag = nullptr;
  bool ok = false;
  // Each step's tag is its number; a step that fails ends the exchange.
  auto step = [&](intptr_t want) {
    return cq.Next(&tag, &ok) && tag == reinterpret_cast<void*>(want) && ok;
  };
  RawCallResult result;
  grpc::ByteBuffer response;
  call->StartCall(reinterpret_cast<void*>(1));
  if (step(1)) {
    grpc::Slice slice(request);
    grpc::ByteBuffer buffer(&slice, 1);
    call->Write(buffer, reinterpret_cast<void*>(2));
    if (step(2)) {
      call->WritesDone(reinterpret_cast<void*>(3));
      if (step(3)) {
        call->Read(&response, reinterpret_cast<void*>(4));
        result.has_response = step(4);
      }
    }
  }
  call->Finish(&result.status, reinterpret_cast<void*>(5));
  while (cq.Next(&tag, &ok) && tag != reinterpret_cast<void*>(5)) {
  }
  ctx.TryCancel();
  cq.Shutdown();
  while (cq.Next(&tag, &ok)) {
  }
  if (result.has_response) {
    std::vector<grpc::Slice> slices;
    if (response.Dump(&slices).ok()) {
      for (const grpc::Slice& s : slices) {
        result.response.append(reinterpret_cast<const char*>(s.begin()), s.size());
      }
    }
  }
  return result;
}

}  // namespace mt::testutil
