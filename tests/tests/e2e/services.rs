//! The standard services: health (no token needed) and reflection.

use tokio_stream::StreamExt;
use tonic_health::pb::HealthCheckRequest;
use tonic_health::pb::health_check_response::ServingStatus;
use tonic_health::pb::health_client::HealthClient;

use crate::support::TestMonitor;

#[tokio::test]
async fn health_is_serving_without_a_token() {
    let monitor = TestMonitor::start().await;
    let mut health = HealthClient::new(monitor.channel().await);
    for service in ["", "warden.v1.Authority", "warden.v1.Admin"] {
        let response = health.check(HealthCheckRequest { service: service.into() }).await.unwrap().into_inner();
        assert_eq!(response.status, ServingStatus::Serving as i32, "{service}");
    }
}

#[tokio::test]
async fn reflection_lists_the_services() {
    use tonic_reflection::pb::v1::ServerReflectionRequest;
    use tonic_reflection::pb::v1::server_reflection_client::ServerReflectionClient;
    use tonic_reflection::pb::v1::server_reflection_request::MessageRequest;
    use tonic_reflection::pb::v1::server_reflection_response::MessageResponse;

    let monitor = TestMonitor::start().await;
    let mut reflection = ServerReflectionClient::new(monitor.channel().await);
    let request = ServerReflectionRequest {
        host: String::new(),
        message_request: Some(MessageRequest::ListServices(String::new())),
    };
    let mut responses = reflection.server_reflection_info(tokio_stream::iter([request])).await.unwrap().into_inner();
    let Some(Ok(response)) = responses.next().await else { panic!("no reflection answer") };
    let Some(MessageResponse::ListServicesResponse(list)) = response.message_response else { panic!("not a list") };
    let names: Vec<String> = list.service.into_iter().map(|s| s.name).collect();
    for expected in ["warden.v1.Authority", "warden.v1.Admin", "grpc.health.v1.Health"] {
        assert!(names.iter().any(|n| n == expected), "{expected} missing from {names:?}");
    }
}
