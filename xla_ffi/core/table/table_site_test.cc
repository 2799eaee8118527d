// Tests of a call site's table (table_site.h): resolved as LookUpTable would
// resolve the handle (the same table, its deferred error raised once, the
// registry's error for an unknown handle and for a closed table), without a
// registry look-up while the table is open, and held weakly.
#include "core/table/table_site.h"

#include <gtest/gtest.h>

#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include "core/table/registry.h"

namespace gearjax {
namespace {

std::shared_ptr<Table> MakeTable() {
  TableSpec spec;
  spec.name = "sited";
  spec.columns.push_back({"x", 4, std::vector<uint8_t>(4, 0)});
  spec.capacity = 4;
  spec.max_length = 2;
  return std::make_shared<Table>(std::move(spec));
}

std::string ClosedMessage(const TableSite& site) {
  try {
    site.Resolve();
  } catch (const Closed& e) {
    return e.what();
  }
  return "";
}

TEST(TableSite, ResolvesTheRegisteredTableWithoutTheRegistry) {
  std::shared_ptr<Table> table = MakeTable();
  const int64_t handle = RegisterTable(table);
  const TableSite site = MakeTableSite(handle);
  EXPECT_TRUE(site.found);
  const int64_t lookups = RegistryLookUps();
  for (int i = 0; i < 3; ++i) EXPECT_EQ(site.Resolve(), table);
  EXPECT_EQ(RegistryLookUps(), lookups);
  UnregisterTable(handle);
  table->Close(0);
}

TEST(TableSite, AnUnknownHandleFailsAsTheRegistryDoes) {
  const TableSite site = MakeTableSite(987654321);
  EXPECT_FALSE(site.found);
  EXPECT_EQ(ClosedMessage(site), "no table has handle 987654321");
}

TEST(TableSite, AClosedTableFailsWithTheRegistrysMessage) {
  std::shared_ptr<Table> table = MakeTable();
  const int64_t handle = RegisterTable(table);
  const TableSite site = MakeTableSite(handle);
  // As a table's owner closes it (module.cc): the handle goes first.
  UnregisterTable(handle);
  table->Close(0);
  const std::string message = ClosedMessage(site);
  EXPECT_NE(message.find("table 'sited' (handle " + std::to_string(handle) + ") is closed"),
            std::string::npos)
      << message;
  EXPECT_NE(message.find("compiled against it"), std::string::npos) << message;
  // Held weakly: once its owner lets it go, the table is gone, and the
  // error is the same.
  table.reset();
  EXPECT_TRUE(site.table.expired());
  EXPECT_EQ(ClosedMessage(site), message);
}

TEST(TableSite, RaisesTheTablesDeferredErrorOnce) {
  std::shared_ptr<Table> table = MakeTable();
  const int64_t handle = RegisterTable(table);
  const TableSite site = MakeTableSite(handle);
  table->DeferError("a priority update failed");
  EXPECT_THROW(site.Resolve(), std::exception);
  EXPECT_EQ(site.Resolve(), table);  // raised once, as LookUpTable raises it
  UnregisterTable(handle);
  table->Close(0);
}

TEST(TableSite, MakingASiteRaisesNothingAndCountsNoLookUp) {
  std::shared_ptr<Table> table = MakeTable();
  const int64_t handle = RegisterTable(table);
  table->DeferError("kept for the next call");
  const int64_t lookups = RegistryLookUps();
  const TableSite site = MakeTableSite(handle);  // no throw: the error waits
  EXPECT_EQ(RegistryLookUps(), lookups);
  EXPECT_THROW(LookUpTable(handle), std::exception);  // still there for the next call
  EXPECT_EQ(RegistryLookUps(), lookups + 1);
  UnregisterTable(handle);
  table->Close(0);
}

}  // namespace
}  // namespace gearjax
