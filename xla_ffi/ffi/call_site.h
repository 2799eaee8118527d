// What a compiled table call resolves once per call site rather than once per
// execution: XLA runs a handler's `instantiate` stage once per call site of an
// executable (a lax.scan body's sample: once, not once per iteration) and
// hands the state it returns to every `execute` (ffi::State). For sample and
// update_priorities the state is the table, found in the registry once and
// then held weakly, and for sample the decoded attributes with the request
// already checked against the table. Execution then reads no attribute, takes
// no registry lock and repeats no check.
//
// Nothing is decided differently from a lookup per call: a closed table, a
// table's deferred error and bad attributes fail every execution with the
// errors LookUpTable and the checks give (an instantiate stage that failed
// would fail the program's compilation instead, so it never fails: it keeps
// the error for the executions). The per-call handlers (registered when the
// stages are not, gearjax/_ffi.py) make the same site on every call.
#pragma once

#include <cstdint>
#include <exception>
#include <memory>

#include "core/table/table.h"
#include "core/table/table_site.h"
#include "ffi/ffi_common.h"

namespace gearjax {

// A sample call site: its attributes, its table, and the request checked
// against the table's spec (which never changes), or the error the check
// raised, rethrown by every execution.
struct SampleSite {
  SampleAttrs attrs{};
  TableSite table;
  SampleRequest request{};
  int64_t width = 0;            // window, or max_length for whole trajectories
  std::exception_ptr invalid;   // set: the attributes are refused
};

// A sample's attributes checked as every call site checks them: codes that
// fit their enums, flags that are 0 or 1, then the table's one check of a
// request (Table::CheckRequest). Also what the Python module's eager sample
// checks its arguments with, so both refuse the same values alike.
SampleRequest CheckedSampleRequest(const Table& table, const SampleAttrs& attrs);

// Never throws but for memory: a missing table or refused attributes are
// kept for the executions to report.
SampleSite MakeSampleSite(const SampleAttrs& attrs);

// The site an execution uses: `site` itself, or, where its table was not
// registered when it was made (only a hand-built call names a handle no
// table had), one made now into `fresh`, so no request goes unchecked.
const SampleSite& Current(const SampleSite& site, SampleSite& fresh);

// What every sample handler binds per execution, from its site, once it has
// resolved the table (site.table.Resolve(), which fails first for a closed
// table or a deferred error) and checked it further (a CUDA handler: that
// this GPU reaches it): the seed's size, the site's verdict on the
// attributes, then the results (BindSampleOutputs).
SampleCall BindSampleCall(const Table& table, const SampleSite& site, size_t seed_words,
                          xla::ffi::RemainingRets& rets, size_t first, SampleResults results);

// The same for a table already resolved and attributes built by the
// handler (the sharded serve step's).
SampleCall BindSampleCall(const Table& table, size_t seed_words, xla::ffi::RemainingRets& rets,
                          size_t first, const SampleAttrs& attrs, SampleResults results);

// The state types, one per platform and kind of site: each platform's XLA
// (jaxlib's for the CPU, the CUDA plugin's own copy) assigns the type id of
// the types registered with it, so no type is registered with two.
enum class Platform { kCpu, kCuda };

template <typename Site, Platform kPlatform>
struct SiteState {
  static xla::ffi::TypeId id;
  Site site;
};

template <typename Site, Platform kPlatform>
xla::ffi::TypeId SiteState<Site, kPlatform>::id = {};

using SampleStateCpu = SiteState<SampleSite, Platform::kCpu>;
using UpdateStateCpu = SiteState<TableSite, Platform::kCpu>;
using SampleStateCuda = SiteState<SampleSite, Platform::kCuda>;
using UpdateStateCuda = SiteState<TableSite, Platform::kCuda>;

// Call sites instantiated since import (_gearjax.call_site_counts() reports
// it beside RegistryLookUps: the tests hold an execution to neither).
int64_t SitesInstantiated();
void CountSiteInstantiated();

// An instantiate stage's body: the state for `site`, never an error (see the
// file comment) but for memory.
template <typename State, typename Site>
xla::ffi::ErrorOr<std::unique_ptr<State>> Instantiated(Site site) {
  try {
    auto state = std::make_unique<State>(State{std::move(site)});
    CountSiteInstantiated();
    return xla::ffi::ErrorOr<std::unique_ptr<State>>(std::move(state));
  } catch (const std::exception& e) {
    return xla::ffi::Unexpected(Fail(std::string("instantiating a call site: ") + e.what()));
  }
}

}  // namespace gearjax
