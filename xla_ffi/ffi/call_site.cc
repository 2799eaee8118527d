// Call sites of sample and update_priorities (call_site.h).
#include "ffi/call_site.h"

#include <atomic>
#include <string>

#include "core/window.h"

namespace gearjax {
namespace {

std::atomic<int64_t> instantiated{0};

// The site's request and width, or the error that refuses them.
void CheckSite(const Table& table, SampleSite& site) {
  try {
    site.request = CheckedSampleRequest(table, site.attrs);
    site.width = WindowWidth(site.attrs.window, table.spec().max_length);
  } catch (...) {
    site.invalid = std::current_exception();
  }
}

}  // namespace

// XLA's attributes are int64 and the enums int32: codes that do not fit are
// refused rather than narrowed into another code.
SampleRequest CheckedSampleRequest(const Table& table, const SampleAttrs& a) {
  if (a.strategy < 0 || a.strategy > INT32_MAX) {
    throw InvalidArgument("unknown sampling strategy " + std::to_string(a.strategy));
  }
  if (a.cut < 0 || a.cut > INT32_MAX) {
    throw InvalidArgument("unknown window cut " + std::to_string(a.cut));
  }
  if (a.replace != 0 && a.replace != 1) throw InvalidArgument("replace must be 0 or 1");
  if (a.pad_left != 0 && a.pad_left != 1) throw InvalidArgument("pad_left must be 0 or 1");
  const SampleRequest request{static_cast<Strategy>(a.strategy), a.alpha, a.count, a.batch_size,
                              a.window, static_cast<Cut>(a.cut), a.replace != 0};
  table.CheckRequest(request);
  return request;
}

int64_t SitesInstantiated() { return instantiated.load(std::memory_order_relaxed); }

void CountSiteInstantiated() { instantiated.fetch_add(1, std::memory_order_relaxed); }

SampleSite MakeSampleSite(const SampleAttrs& attrs) {
  SampleSite site;
  site.attrs = attrs;
  site.table = MakeTableSite(attrs.table_handle);
  const std::shared_ptr<Table> table = site.table.table.lock();
  if (table != nullptr) CheckSite(*table, site);  // else Resolve reports it
  return site;
}

const SampleSite& Current(const SampleSite& site, SampleSite& fresh) {
  if (site.table.found) return site;
  fresh = MakeSampleSite(site.attrs);
  return fresh;
}

SampleCall BindSampleCall(const Table& table, size_t seed_words, xla::ffi::RemainingRets& rets,
                          size_t first, const SampleAttrs& attrs, SampleResults results) {
  SampleSite site;
  site.attrs = attrs;
  CheckSite(table, site);
  return BindSampleCall(table, site, seed_words, rets, first, results);
}

SampleCall BindSampleCall(const Table& table, const SampleSite& site, size_t seed_words,
                          xla::ffi::RemainingRets& rets, size_t first, SampleResults results) {
  if (seed_words != 2) throw InvalidArgument("the seed must be two uint32 words");
  if (site.invalid) std::rethrow_exception(site.invalid);
  return {site.request, site.width,
          BindSampleOutputs(table, rets, first, site.request.batch, site.width, results)};
}

}  // namespace gearjax
