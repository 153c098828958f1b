export { HttpTransportType } from "@microsoft/signalr";
export { EVENT_NAMES, HUB_PATH, MessengerClient, SIGNAL_NAMES } from "./client.js";
export type {
  AppEventPayload,
  ClientOptions,
  ClientStats,
  EventName,
  HubMessages,
  ResyncReason,
  SignalName,
  TransportName,
} from "./client.js";
export { MessengerRest, PAGE_LIMIT, RestError, SYNC_LIMIT, toTimeline } from "./rest.js";
export type { ChatSummary, SendOptions } from "./rest.js";
export { Timeline, merge } from "./timeline.js";
export type { Change, TimelineMessage } from "./timeline.js";
export type * from "./contracts.js";
