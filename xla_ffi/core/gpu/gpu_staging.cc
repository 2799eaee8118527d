// A table's GPU staging lists and mirror copies (see gpu_staging.h).
#include "core/gpu/gpu_staging.h"

#include <algorithm>
#include <new>
#include <utility>

#include "core/gpu/tree_mirror.h"

namespace gearjax {

MappedArray<int64_t>* GpuStaging::ListFor(int64_t entries, uint64_t ticket,
                                          SampleTickets& tickets, Retired* retired) {
  const size_t needed = static_cast<size_t>(entries);
  std::shared_ptr<List>* reusable = nullptr;  // ended, but too small
  for (auto& list : lists_) {
    if (tickets.InFlight(list->ticket)) continue;
    if (list->entries.size() >= needed) {
      list->ticket = ticket;
      return &list->entries;
    }
    reusable = &list;
  }
  // None large enough: a new list, in place of an ended one that is too
  // small, or beside the others (as many as calls in flight at once).
  auto made = std::make_shared<List>(
      List{ticket, MappedArray<int64_t>(std::max<size_t>(needed * 2, 1024), mapped_)});
  if (made->entries.device_data() == nullptr) return nullptr;
  if (reusable == nullptr) reusable = &lists_.emplace_back();
  if (*reusable != nullptr) retired->push_back(std::move(*reusable));  // freed unlocked
  *reusable = std::move(made);
  return &(*reusable)->entries;
}

void GpuStaging::CopyMirrors(const SumTree* const* trees, int n, uint64_t ticket,
                             const void* stream, SampleTickets& tickets, MirrorCopies* copies,
                             double** mirrors, Retired* retired) {
  TreeMirror* mirror[kMaxMirrorCopies] = {};
  int64_t logged = 0;
  for (int i = 0; i < n; ++i) {
    mirrors[i] = nullptr;
    if (copies->n + i >= kMaxMirrorCopies) continue;
    mirror[i] = trees[i]->Mirror(device_);
    if (mirror[i] != nullptr) logged += std::max<int64_t>(mirror[i]->logged(), 0);
  }
  MappedArray<int64_t>* list = nullptr;
  if (logged > 0) {
    try {
      list = ListFor(logged, ticket, tickets, retired);
    } catch (const std::bad_alloc&) {
      list = nullptr;
    }
  }
  int64_t used = 0;
  for (int i = 0; i < n; ++i) {
    if (mirror[i] == nullptr) continue;
    mirrors[i] = mirror[i]->device();
    const int64_t entries = mirror[i]->logged();
    if (entries == 0) continue;
    if (entries > 0 && list == nullptr) mirror[i]->WroteAll();  // no list: copy every node
    const double* from = trees[i]->device_view().nodes;
    copies->copy[copies->n++] =
        list == nullptr ? mirror[i]->Take(from, nullptr, nullptr)
                        : mirror[i]->Take(from, list->data() + used, list->device_data() + used);
    used += std::max<int64_t>(entries, 0);
  }
  if (copies->n > 0) {
    if (copy_last_ != 0 && stream != copy_stream_) copy_streams_mixed_ = true;
    copy_last_ = std::max(copy_last_, ticket);
    copy_stream_ = stream;
    // Every copy that may still run, not only the latest: callers enqueue
    // after letting go of the table's lock, so a later ticket's copy may run
    // (and end) before an earlier one's.
    std::erase_if(copies_in_flight_,
                  [&](const Copy& c) { return !tickets.InFlight(c.ticket); });
    copies_in_flight_.push_back({ticket, stream});
  }
}

bool GpuStaging::OtherStreamCopyInFlight(const void* stream, SampleTickets& tickets) const {
  return std::any_of(copies_in_flight_.begin(), copies_in_flight_.end(), [&](const Copy& c) {
    return (c.stream != stream || copy_streams_mixed_) && tickets.InFlight(c.ticket);
  });
}

void GpuStaging::TakeLists(std::vector<std::shared_ptr<void>>* memory) {
  for (auto& list : lists_) memory->emplace_back(std::move(list));
  lists_.clear();
}

}  // namespace gearjax
