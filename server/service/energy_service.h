#ifndef HEADROOM_SERVER_SERVICE_ENERGY_SERVICE_H_
#define HEADROOM_SERVER_SERVICE_ENERGY_SERVICE_H_

// headroom.v1.Energy: estimates from the installed energy curves, refits
// from measured energy runs, the stored curve sets and their promotion.

#include <memory>
#include <string>

#include "headroom/v1/planner.grpc.pb.h"
#include "server/service/energy_points_source.h"
#include "server/service/http_server.h"
#include "server/service/planner_state.h"

namespace headroom {

class EnergyService final : public v1::Energy::CallbackService {
 public:
  // `state` must outlive the service. The picture's measured points come
  // from `points` (null: StoredCurveSetPoints over the state's store).
  explicit EnergyService(PlannerState* state,
                         std::unique_ptr<EnergyPointSource> points = nullptr);

  grpc::ServerUnaryReactor* EstimateEnergy(
      grpc::CallbackServerContext* context,
      const v1::EstimateEnergyRequest* request,
      v1::EstimateEnergyResponse* response) override;
  grpc::ServerUnaryReactor* RefitEnergy(
      grpc::CallbackServerContext* context,
      const v1::RefitEnergyRequest* request,
      v1::RefitEnergyResponse* response) override;
  grpc::ServerUnaryReactor* ListEnergyCurveSets(
      grpc::CallbackServerContext* context,
      const v1::ListEnergyCurveSetsRequest* request,
      v1::ListEnergyCurveSetsResponse* response) override;
  grpc::ServerUnaryReactor* PromoteEnergyCurveSet(
      grpc::CallbackServerContext* context,
      const v1::PromoteEnergyCurveSetRequest* request,
      v1::PromoteEnergyCurveSetResponse* response) override;
  grpc::ServerUnaryReactor* TrainEnergy(
      grpc::CallbackServerContext* context,
      const v1::TrainEnergyRequest* request,
      v1::TrainEnergyResponse* response) override;
  grpc::ServerUnaryReactor* PlotEnergy(
      grpc::CallbackServerContext* context,
      const v1::PlotEnergyRequest* request,
      v1::PlotEnergyResponse* response) override;

  // The answers of TrainEnergy and PlotEnergy without gRPC. Store I/O:
  // call off the gRPC threads.
  absl::StatusOr<v1::TrainEnergyResponse> AnswerTrainEnergy(
      const v1::TrainEnergyRequest& request) const;
  absl::StatusOr<v1::PlotEnergyResponse> Plot(
      const v1::PlotEnergyRequest& request) const;

  // /energy: the current curves of ?arch= (default: every architecture a
  // query may name; one borrowing another's curves says it has no
  // measurements yet, BorrowedCurveNotice) with their measured points, as
  // HTML; ?include_simulated=1 draws simulated points too. An ?arch= the
  // curves do not know is INVALID_ARGUMENT naming the allowed ones.
  absl::StatusOr<std::string> EnergyHtml(const HttpServer::Query& query) const;

 private:
  PlannerState& state_;
  std::unique_ptr<EnergyPointSource> points_;
};

}  // namespace headroom

#endif  // HEADROOM_SERVER_SERVICE_ENERGY_SERVICE_H_
